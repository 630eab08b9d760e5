"""What a fit prints in its first minute: each Lightning log line once, no warning about the
frozen reference policy on every run."""

import subprocess
import sys

from conftest import ROOT

LOG_ONCE = """
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='root: %(message)s')
from lightning.pytorch.utilities import rank_zero_info
from wmrl.fit import log_lines_once
rank_zero_info('before')
log_lines_once()
rank_zero_info('after')
"""


def test_each_lightning_line_prints_once_where_the_app_configured_logging():
    out = subprocess.run([sys.executable, "-c", LOG_ONCE], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    text = out.stdout + out.stderr
    # Lightning's own console handler and the root's both printed it; then the root's alone
    assert text.count("before") == 2 and "INFO: before" in out.stderr
    assert text.count("after") == 1 and "root: after" in out.stdout
