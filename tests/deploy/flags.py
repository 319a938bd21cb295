"""Command lines: reading --flags out of an argv, and holding an argv to the flags its program defines (from the
built binary's --help/--helpfull, or the source's ABSL_FLAG definitions without a build)."""
import os
import re
import subprocess

from util import BINARIES, need, read

ABSL_BUILTIN_FLAGS = {"flagfile", "fromenv", "tryfromenv", "undefok", "help", "helpfull", "helpshort",
                      "helppackage", "version", "only_check_args"}


def split_flags(argv):
    """[(name, value or None)] of the --flags in argv; `--name value` is accepted like `--name=value`."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                name, value = a[2:].split("=", 1)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                name, value = a[2:], argv[i + 1]
                i += 1
            else:
                name, value = a[2:], None
            out.append((name, value))
        i += 1
    return out


def flag_value(argv, name):
    """The last value of --name in argv, whichever of dashes or underscores spell it."""
    values = [v for n, v in split_flags(argv) if n.replace("-", "_") == name.replace("-", "_")]
    return values[-1] if values else None


class Programs:
    """The flags of the three layerpipe programs, asked once each."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._flags = {}

    def flags_of(self, program, sub=()):
        """Flag names `program` accepts: from the built binary's help, else from the source (None: unknown)."""
        key = (program,) + tuple(sub)
        if key in self._flags:
            return self._flags[key]
        names = None
        if self.ctx.bin:
            exe = os.path.join(self.ctx.bin, program)
            if program == "layerpipe":
                out = subprocess.run([exe, *sub, "--help"], capture_output=True, text=True, timeout=30)
                names = set(re.findall(r"^\s+--([a-z0-9][a-z0-9-]*)", out.stdout + out.stderr, re.M))
            else:
                out = subprocess.run([exe, "--helpfull"], capture_output=True, text=True, timeout=30)
                names = set(re.findall(r"^\s+--([a-z0-9_]+) \(", out.stdout + out.stderr, re.M))
            need(names, f"{program} --help listed no flags")
        elif program != "layerpipe":
            main = self.ctx.path("coordinator" if program == "layerpipe-coordinator" else "worker", "main.cc")
            names = set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", read(main)))
            need(names, f"no ABSL_FLAG definitions in {main}")
        if names is not None and program != "layerpipe":
            names |= ABSL_BUILTIN_FLAGS
        self._flags[key] = names
        return names

    def check_argv(self, argv, where, in_flagfile=False):
        """argv names a layerpipe program and only flags it defines. Returns the program's name."""
        need(argv, f"{where}: empty command")
        program = os.path.basename(argv[0])
        if program == "layerpipe-check-model":
            return program
        need(program in BINARIES, f"{where}: {argv[0]!r} is not one of {', '.join(BINARIES)}")
        sub = []
        if program == "layerpipe":
            for a in argv[1:]:
                if a.startswith("-"):
                    break
                sub.append(a)
        known = self.flags_of(program, sub)
        if known is None:
            return program  # the CLI's flags are only known from a built binary
        for name, _ in split_flags(argv[1 + len(sub):]):
            # The servers turn dashes into underscores on their command line, not in flagfiles (absl reads those).
            spelled = name if in_flagfile or program == "layerpipe" else name.replace("-", "_")
            need(spelled in known, f"{where}: {program} has no flag --{name}")
        return program

    def check_flag_lines(self, text, program, where):
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                self.check_argv([program, line], where, in_flagfile=True)
