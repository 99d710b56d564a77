"""Turning media into model inputs: images (image.py), video frames (video.py)."""

from .image import ProcessedImage, load_image, process_image, target_size
from .video import VideoFrames, load_video

__all__ = ["ProcessedImage", "load_image", "process_image", "target_size", "VideoFrames", "load_video"]
