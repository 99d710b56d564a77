"""Images, video and audio in prompts: preprocessing, placeholder expansion, encoding and placement
(spec §3.7, §4.6, §5.3, §6).

A chat message part `{"type": "image", "image": src}` (also under "url" or "path") renders as one
`<|image|>` in the template's text; `expand` replaces it by `<|image>` + n × `<|image|>` + `<image|>`, n
being the image's soft-token count. A `{"type": "video", "video": src}` part becomes, for every sampled
frame, `"mm:ss <|image>" + n × <|video|> + "<image|>"`, frames joined by a space. When the prompt runs,
`fill` writes each item's soft tokens over its placeholder rows of `model.embed(ids)` in order, and
`block_ids` gives every image and every video frame its own bidirectional block (used by the decoder on
`use_bidirectional_attention == "vision"` models only). A `{"type": "audio", "audio": src}` part (optional
"sample_rate", "max_audio_s") renders as one `<|audio|>`, expanded to `<|audio>` + n × `<|audio|>` +
`<audio|>`; audio soft tokens attend causally like text (no block).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ._core import InputError
from .files import CHECKPOINT_JSON_MAX_BYTES, read_checkpoint_file
from .preprocess.audio import ProcessedAudio, process_audio
from .preprocess.image import SUPPORTED_SOFT_TOKENS, ProcessedImage, process_image
from .preprocess.video import load_video, timestamp

PART_SOURCE_KEYS = ("image", "video", "audio", "url", "path")
MEDIA_KINDS = ("image", "video", "audio")


@dataclass
class MediaItem:
    """One image, video or audio clip of a prompt, preprocessed; soft tokens once encoded."""
    kind: str                                   # "image" | "video" | "audio"
    frames: list[ProcessedImage]                # one for an image, the sampled frames of a video, none for audio
    timestamps: list[float] = field(default_factory=list)  # video: seconds of each frame
    preprocess_s: float = 0.0
    encode_s: float = 0.0
    soft: np.ndarray | None = None              # float32 [tokens, hidden] once encoded
    audio: ProcessedAudio | None = None         # the clip's features (kind "audio")

    @property
    def tokens_per_frame(self) -> list[int]:
        """Soft tokens of each placeholder run the item fills (an audio clip is one run)."""
        if self.audio is not None:
            return [self.audio.num_soft_tokens]
        return [f.num_soft_tokens for f in self.frames]

    @property
    def tokens(self) -> int:
        return sum(self.tokens_per_frame)

    @property
    def key(self) -> str:
        """Identity of the content (for reusing a cached prefix): a hash of every frame's pixels / the features."""
        h = hashlib.sha1(self.kind.encode())
        if self.audio is not None:
            h.update(np.ascontiguousarray(self.audio.features).view(np.uint8))
            h.update(str(self.audio.valid_frames).encode())
        for f in self.frames:
            h.update(np.ascontiguousarray(f.pixel_values).view(np.uint8))
            h.update(np.ascontiguousarray(f.positions).view(np.uint8))
        return h.hexdigest()


class MediaProcessor:
    """The media preprocessing settings of one checkpoint: patch sizes from config.json, default budgets
    from processor_config.json (280 soft tokens per image, 70 per video frame when absent), the audio
    front end its audio part takes (log-mel for a conformer tower, waveform frames on the 12B)."""

    CACHE_ITEMS = 16  # soft tokens of the last images / videos encoded, by content (a repeated image is free)

    def __init__(self, model):
        cfg = model.config
        self.model = model
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.vision = cfg.vision_config
        self.has_audio = cfg.audio_config is not None
        self.unified = cfg.is_unified
        self.image_budget, self.video_budget, self.num_frames = 280, 70, 32
        path = os.path.join(model.path, "processor_config.json")
        if os.path.exists(path):
            try:
                pc = json.loads(read_checkpoint_file(path, CHECKPOINT_JSON_MAX_BYTES))  # CheckpointError: not a file
            except ValueError:  # not JSON (or not UTF-8): the defaults
                pc = {}
            ip = pc.get("image_processor", pc) if isinstance(pc, dict) else {}
            vp = pc.get("video_processor", {}) if isinstance(pc, dict) else {}
            if isinstance(ip, dict) and ip.get("max_soft_tokens") in SUPPORTED_SOFT_TOKENS:
                self.image_budget = ip["max_soft_tokens"]
            if isinstance(vp, dict) and vp.get("max_soft_tokens") in SUPPORTED_SOFT_TOKENS:
                self.video_budget = vp["max_soft_tokens"]
            if isinstance(vp, dict) and isinstance(vp.get("num_frames"), int) and vp["num_frames"] > 0:
                self.num_frames = vp["num_frames"]

    def _check(self, what: str) -> None:
        if self.vision is None:
            raise InputError(f"{what}: this checkpoint ({self.model.config.family}) has no vision encoder "
                             f"(no vision_config in config.json), so it cannot take images or video")

    def _frame(self, src, budget: int, what: str) -> ProcessedImage:
        v = self.vision
        return process_image(src, max_soft_tokens=budget, patch_size=v.patch_size,
                             pooling_kernel_size=v.pooling_kernel_size, merge_patches=self.unified, what=what)

    def image(self, src, max_soft_tokens: int | None = None, what: str = "image") -> MediaItem:
        self._check(what)
        t0 = time.perf_counter()
        frame = self._frame(src, self.image_budget if max_soft_tokens is None else max_soft_tokens, what)
        return MediaItem("image", [frame], preprocess_s=time.perf_counter() - t0)

    def video(self, src, max_soft_tokens: int | None = None, num_frames: int | None = None, fps: float | None = None,
              video_fps: float | None = None, what: str = "video") -> MediaItem:
        self._check(what)
        t0 = time.perf_counter()
        clip = load_video(src, num_frames=None if fps is not None else (self.num_frames if num_frames is None else num_frames), fps=fps,
                          video_fps=video_fps, what=what)
        budget = self.video_budget if max_soft_tokens is None else max_soft_tokens
        frames = [self._frame(f, budget, f"{what} frame {i}") for i, f in zip(clip.indices, clip.frames)]
        return MediaItem("video", frames, timestamps=clip.timestamps, preprocess_s=time.perf_counter() - t0)

    def audio(self, src, sample_rate=None, max_audio_s: float | None = None, what: str = "audio") -> MediaItem:
        if not self.has_audio:
            raise InputError(f"{what}: this checkpoint ({self.model.config.family}) has no audio encoder (no "
                             f"audio_config in config.json), so it cannot take audio; Gemma 4 hears in E2B, E4B "
                             f"and the 12B")
        t0 = time.perf_counter()
        frame = self.model.config.audio_config.audio_embed_dim if self.unified else 0
        clip = process_audio(src, sample_rate=sample_rate, unified=self.unified, max_audio_s=max_audio_s,
                             unified_frame=frame, what=what)
        return MediaItem("audio", [], audio=clip, preprocess_s=time.perf_counter() - t0)

    def encode(self, item: MediaItem) -> np.ndarray:
        """Soft tokens float32 [tokens, hidden] (every frame of a video, in order), computed once."""
        if item.soft is None:
            key = item.key
            if key in self._cache:
                self._cache.move_to_end(key)
                item.soft = self._cache[key]
                return item.soft
            t0 = time.perf_counter()
            if item.audio is not None:
                item.soft = self.model._core.encode_audio(item.audio.features, item.audio.valid_frames)[1]
            else:
                parts = [self.model._core.encode_image(f.pixel_values, f.positions)[1] for f in item.frames]
                item.soft = np.concatenate(parts) if len(parts) > 1 else parts[0]
            item.soft.flags.writeable = False  # shared through the cache
            item.encode_s = time.perf_counter() - t0
            self._cache[key] = item.soft
            while len(self._cache) > self.CACHE_ITEMS:
                self._cache.popitem(last=False)
        return item.soft

    def from_part(self, part: dict, where: str) -> MediaItem:
        """A MediaItem from a chat message part {"type": "image" | "video" | "audio", "image" | "video" | "audio" |
        "url" | "path": src, optional "max_soft_tokens", "num_frames", "fps" (video), "sample_rate", "max_audio_s"
        (audio)}."""
        kind = part["type"]
        src = next((part[k] for k in PART_SOURCE_KEYS if part.get(k) is not None), None)
        if src is None:
            raise InputError(f"{where}: a {kind} part needs its source under '{kind}', 'url' or 'path'")
        if kind == "audio":
            return self.audio(src, part.get("sample_rate"), part.get("max_audio_s"), where)
        budget = part.get("max_soft_tokens")
        if kind == "image":
            return self.image(src, budget, where)
        return self.video(src, budget, part.get("num_frames"), part.get("fps"), part.get("video_fps"), where)


def media_parts(messages) -> list[tuple[str, dict]]:
    """(where, part) of every image / video / audio part, in the order the chat template renders them."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, (list, tuple)):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") in MEDIA_KINDS:
                    out.append((f"messages[{i}].content[{j}]", part))
    return out


def expand(text: str, items: list[MediaItem], tokens: dict[str, str]) -> str:
    """Replaces each `<|image|>` / `<|video|>` / `<|audio|>` of the rendered prompt, in order, by its item's
    soft-token run. tokens: the token strings image, video, audio, boi, eoi, boa, eoa. InputError when the
    counts differ."""
    placeholder = {k: tokens[k] for k in MEDIA_KINDS}
    queues = {k: [it for it in items if it.kind == k] for k in placeholder}
    for kind, token in placeholder.items():
        n = text.count(token)
        if n != len(queues[kind]):
            raise InputError(f"the prompt has {n} {token} placeholder(s) but {len(queues[kind])} {kind}(s) were given")
    out, i = [], 0
    while True:
        hits = [(text.find(tok, i), kind) for kind, tok in placeholder.items()]
        hits = [(pos, kind) for pos, kind in hits if pos >= 0]
        if not hits:
            out.append(text[i:])
            return "".join(out)
        pos, kind = min(hits)
        out.append(text[i:pos])
        item = queues[kind].pop(0)
        if kind == "image":
            out.append(tokens["boi"] + tokens["image"] * item.tokens + tokens["eoi"])
        elif kind == "audio":
            out.append(tokens["boa"] + tokens["audio"] * item.tokens + tokens["eoa"])
        else:
            out.append(" ".join(f"{timestamp(t)} {tokens['boi']}{tokens['video'] * n}{tokens['eoi']}"
                                for t, n in zip(item.timestamps, item.tokens_per_frame)))
        i = pos + len(placeholder[kind])


def runs(ids: np.ndarray, token: int) -> list[tuple[int, int]]:
    """[start, end) of every maximal run of `token` in ids."""
    m = np.concatenate([[False], np.asarray(ids) == token, [False]])
    d = np.flatnonzero(m[1:] != m[:-1])
    return list(zip(d[0::2].tolist(), d[1::2].tolist()))


@dataclass
class Placement:
    """Where each item's soft tokens go in a token sequence: (row start, row end) per frame."""
    items: list[MediaItem]
    rows: list[list[tuple[int, int]]]


def place(ids: np.ndarray, items: list[MediaItem], token_ids: dict[str, int], offset: int = 0) -> Placement:
    """Matches items (in order) to the placeholder runs of ids[offset:]: an image to the next image run, a
    video's frames to the next runs of video tokens, a clip to the next audio run. token_ids: the
    placeholder id of each kind. Every run must be filled exactly (InputError)."""
    tail = np.asarray(ids)[offset:]
    free = {kind: [(s + offset, e + offset) for s, e in runs(tail, token_ids[kind])] for kind in MEDIA_KINDS}
    rows = []
    for n, item in enumerate(items):
        need = item.tokens_per_frame
        got = free[item.kind][:len(need)]
        del free[item.kind][:len(need)]
        if len(got) < len(need):
            raise InputError(f"{item.kind} {n}: the token ids hold no placeholder run left for it (each {item.kind} needs "
                             f"its expanded run, as model.encode_prompt returns it)")
        for (s, e), k in zip(got, need):
            if e - s != k:
                raise InputError(f"{item.kind} {n}: its placeholder run at position {s} has {e - s} tokens, the "
                                 f"{item.kind} gives {k} soft tokens")
        rows.append(got)
    for kind, left in free.items():
        if left:
            raise InputError(f"the token ids hold {len(left)} {kind} placeholder run(s) no {kind} fills "
                             f"(first at position {left[0][0]})")
    return Placement(items, rows)


def block_ids(length: int, placement: Placement, offset: int = 0) -> np.ndarray:
    """One bidirectional block per image and per video frame, -1 elsewhere (audio included: it attends
    causally), for positions offset … length-1."""
    out = np.full(length - offset, -1, np.int32)
    b = 0
    for item, frame_rows in zip(placement.items, placement.rows):
        if item.kind == "audio":
            continue
        for s, e in frame_rows:
            out[s - offset:e - offset] = b
            b += 1
    return out
