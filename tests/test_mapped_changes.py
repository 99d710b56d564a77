"""A checkpoint file changed on disk under a loaded model (issue 14, item 5). The weights are memory-mapped:
a file truncated or modified in place would feed a running model missing pages (SIGBUS) or mixed weights,
so every new session checks the files first (one stat each) and refuses with a CheckpointError naming the
file. A file replaced at its path (a new inode) or deleted leaves the mapping whole: the model goes on."""

import os
import shutil

import numpy as np
import pytest

import markbase as mb
from markbase.testing import make_checkpoint


@pytest.fixture()
def ckpt(tmp_path):
    return make_checkpoint(tmp_path / "m", family="e2b", size="tiny", dtype="bf16", seed=2, text_only=True)


def weights_file(d):
    return os.path.join(d, "model.safetensors")


def test_grown_file_is_refused_at_the_next_session(ckpt):
    model = mb.load(ckpt)
    model.session().prefill([2, 5, 6])
    with open(weights_file(ckpt), "ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(mb.CheckpointError, match=r"model\.safetensors: grown from \d+ to \d+ bytes since the model"):
        model.session()
    with pytest.raises(mb.CheckpointError, match="load it again"):
        model.generate("Hi", max_new_tokens=2)
    with pytest.raises(mb.CheckpointError, match="trailing bytes"):  # and a fresh load names what is wrong
        mb.load(ckpt)


def test_truncated_file_is_refused_before_any_page_is_read(ckpt):
    model = mb.load(ckpt)
    size = os.path.getsize(weights_file(ckpt))
    os.truncate(weights_file(ckpt), size // 2)  # no forward below touches the lost pages
    with pytest.raises(mb.CheckpointError, match="truncated from"):
        model.session()


def test_file_modified_in_place_is_refused(ckpt):
    model = mb.load(ckpt)
    st = os.stat(weights_file(ckpt))
    os.utime(weights_file(ckpt), ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(mb.CheckpointError, match="modified in place"):
        model.session()


def test_replaced_or_deleted_file_leaves_the_model_running(ckpt, tmp_path):
    model = mb.load(ckpt)
    want = model.session().prefill([2, 5, 6])
    other = make_checkpoint(tmp_path / "other", family="e2b", size="tiny", dtype="bf16", seed=3, text_only=True)
    tmp = weights_file(ckpt) + ".new"
    shutil.copy(weights_file(other), tmp)
    os.replace(tmp, weights_file(ckpt))  # a new file at the path: the mapping still holds the old one
    np.testing.assert_array_equal(model.session().prefill([2, 5, 6]), want)
    os.remove(weights_file(ckpt))
    np.testing.assert_array_equal(model.session().prefill([2, 5, 6]), want)
