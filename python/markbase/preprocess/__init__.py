"""Turning media into model inputs: images (image.py), video frames (video.py), audio (audio.py)."""

from .audio import ProcessedAudio, load_audio, log_mel, process_audio, waveform_frames
from .image import ProcessedImage, load_image, process_image, target_size
from .video import VideoFrames, load_video

__all__ = ["ProcessedAudio", "load_audio", "log_mel", "process_audio", "waveform_frames", "ProcessedImage", "load_image", "process_image", "target_size", "VideoFrames", "load_video"]
