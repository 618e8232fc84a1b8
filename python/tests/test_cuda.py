"""spdl_go.cuda: the CUDA runtime is optional and found at run time."""

import subprocess
import sys

from spdl_go import cuda


def test_status_reports_what_it_found():
    st = cuda.status()
    if st.available:
        assert st.devices >= 1 and st.path and st.runtime_version > 0
        return
    # No GPU here (CI): either no runtime at all, or a runtime without a
    # driver or device; either way the reason is spelled out.
    assert st.devices == 0 and st.error
    if st.path:
        assert st.runtime_version >= 11000
        assert "cuda" in st.error.lower()
    else:
        assert "SPDL_GO_CUDART" in st.error


def test_no_runtime_is_a_clear_message_not_a_crash():
    code = """
import os
os.environ["SPDL_GO_CUDART"] = "/nonexistent/libcudart.so"
from spdl_go import cuda
cuda.runtime_candidates = lambda: []
st = cuda.status()
print(st.available, st.error)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # A runtime on the linker's default path would load; otherwise the
    # message names what was tried.
    assert out.startswith("True") or ("/nonexistent/libcudart.so" in out and "False" in out)
