"""tools/uv_sources.py: `make setup` hands pip's package sources to uv unchanged."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("uv_sources", Path(__file__).parents[1] / "tools" / "uv_sources.py")
uv_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_sources)


@pytest.mark.parametrize("listing, expected", [
    ("", {}),
    ("global.find-links='/opt/wheels'\nglobal.cert='/etc/ssl/ca.crt'", {"find-links": ["/opt/wheels"]}),
    # several values in one setting, as pip splits them
    ("global.extra-index-url='file:///a/simple file:///b/simple'",
     {"extra-index-url": ["file:///a/simple", "file:///b/simple"]}),
    # PIP_* variables override the files, whichever pip lists first
    (":env:.index-url='https://mirror/simple'\nglobal.index-url='https://pypi.org/simple'",
     {"index-url": ["https://mirror/simple"]}),
    # pip lists by name; its precedence is global < user < site < environment
    ("global.constraint='/g.txt'\nsite.constraint='/s.txt'\nuser.constraint='/u.txt'", {"constraint": ["/s.txt"]}),
])
def test_pip_settings_become_uv_sources(listing, expected):
    assert uv_sources.pip_settings(listing) == expected


def test_arguments_name_every_source_pip_uses(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/w1 /w2")
    monkeypatch.setenv("PIP_CONSTRAINT", "/c.txt")
    args = uv_sources.shlex.split(uv_sources.arguments())
    assert {"--find-links=/w1", "--find-links=/w2", "--constraint=/c.txt"} <= set(args)
