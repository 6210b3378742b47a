"""Neovim, headless, with the editors page's configuration as written, receiving accel-lint's
diagnostics for a buggy script.

    python bench/nvim_diagnostics.py [--nvim nvim] [--file fixtures/lsp/train.py]

Takes the Lua block of docs/editors.md (it was the README's until the docs site) that follows :data:`MARKER`, uses it as ``init.lua`` for
``nvim --headless``, opens the script, waits for diagnostics, and writes the output of
``:lua print(vim.inspect(vim.diagnostic.get()))`` to bench/results/nvim_diagnostics.txt.
``accel-lint`` is found on PATH (this interpreter's scripts folder comes first).
tests/test_lsp.py runs the same check where nvim is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MARKER = "-- Neovim 0.7 to 0.10"
WAIT = "lua vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 100)"


def readme_config(readme: Path = REPO / "docs" / "editors.md") -> str:
    """The editors page's Lua block that starts with :data:`MARKER`."""
    for block in re.findall(r"```lua\n(.*?)```", readme.read_text(encoding="utf-8"), re.DOTALL):
        if block.startswith(MARKER):
            return block
    raise LookupError(f"no ```lua block starting with {MARKER!r} in {readme}")


def run(target: Path, nvim: str = "nvim", timeout: float = 90) -> subprocess.CompletedProcess:
    """Neovim's output (stdout and stderr together) for ``target`` with the editors page's config."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        init = Path(tmp) / "init.lua"
        init.write_text(readme_config(), encoding="utf-8")
        env["XDG_STATE_HOME"] = env["XDG_DATA_HOME"] = tmp  # no shada or log in the user's home
        return subprocess.run([nvim, "--headless", "-u", str(init), str(target), "-c", WAIT,
                               "-c", "lua print(vim.inspect(vim.diagnostic.get()))", "-c", "qa!"],
                              cwd=target.parent, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nvim", default="nvim")
    parser.add_argument("--file", type=Path, default=REPO / "fixtures" / "lsp" / "train.py")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "nvim_diagnostics.txt")
    args = parser.parse_args()
    version = subprocess.run([args.nvim, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    proc = run(args.file.resolve(), args.nvim)
    output = proc.stdout + proc.stderr
    header = (f"# {version}, headless, init.lua = docs/editors.md's block starting {MARKER!r}\n"
              f"# nvim --headless -u init.lua {args.file.relative_to(REPO) if args.file.is_relative_to(REPO) else args.file} "
              f"-c '{WAIT}' -c 'lua print(vim.inspect(vim.diagnostic.get()))' -c 'qa!'\n")
    args.out.write_text(header + output.replace("\r\n", "\n").strip() + "\n", encoding="utf-8")
    print(output)
    print(f"wrote {args.out}")
    return 0 if "AL101" in output else 1


if __name__ == "__main__":
    sys.exit(main())
