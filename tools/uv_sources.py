"""Print pip's package sources as uv arguments, for `make setup`.

uv reads none of pip's configuration (pip.conf, PIP_* variables). A machine that serves
wheels from its own disk (find-links, a local index) or caps versions (a constraints file)
says so to pip; passing the same settings to uv keeps both installers on the same releases.
pip's own order of precedence decides which of several settings holds.
"""

import shlex
import subprocess
import sys

# pip setting -> uv option; each may hold several space-separated values
UV_OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
# pip's precedence, lowest first: the files, then PIP_* variables (`pip config list` sorts by name)
PRECEDENCE = ["global", "user", "site", ":env:"]


def pip_settings(listing: str) -> dict[str, list[str]]:
    """Settings from `pip config list` lines such as `global.find-links='/opt/wheels'`."""
    by_origin: dict[str, dict[str, list[str]]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        origin, _, name = key.rpartition(".")
        if sep and name in UV_OPTIONS:
            words = shlex.split(value)
            by_origin.setdefault(name, {})[origin] = words[0].split() if words else []
    return {name: origins[max(origins, key=lambda o: PRECEDENCE.index(o) if o in PRECEDENCE else -1)]
            for name, origins in by_origin.items()}


def arguments() -> str:
    """uv's options for the sources this interpreter's pip would install from."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, check=False).stdout
    return shlex.join(f"{UV_OPTIONS[name]}={value}" for name, values in pip_settings(listing).items()
                      for value in values)


if __name__ == "__main__":
    print(arguments())
