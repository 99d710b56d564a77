"""The extension module exports PyInit__core and nothing else.

Any other global symbol (typically std:: template instances, or all of a statically linked libstdc++)
can be bound by the dynamic linker to another copy of the same symbol already loaded in the process;
two libstdc++ copies mixing their locale facets crashed the first `mb.load` (issue 15). The linker
version script in cmake/extension.version keeps the export list to the module init.
"""

import shutil
import subprocess
import sys

import markbase._core as core


def exported_symbols(path: str) -> list[str]:
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to list the extension's exported symbols"
    if sys.platform == "darwin":
        out = subprocess.run([nm, "-gU", path], capture_output=True, text=True, check=True).stdout
    else:
        out = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    return [n.lstrip("_") if sys.platform == "darwin" else n for n in names]


def test_extension_exports_only_module_init():
    names = exported_symbols(core.__file__)
    assert "PyInit__core" in names, f"{core.__file__} does not export PyInit__core: {names[:20]}"
    others = [n for n in names if n != "PyInit__core"]
    assert not others, f"{core.__file__} exports {len(others)} symbols besides PyInit__core, e.g. {others[:10]}"
