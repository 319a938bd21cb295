"""Reading the compose file and the systemd units as their tools would: compose's variable interpolation,
unit files with line continuations, systemd's expansion of ExecStart lines from the shipped env files, and
the stages of a Dockerfile."""
import os
import re
import shlex

import yaml

from util import Fail, need, read


_INTERP = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text, env):
    """Compose's variable substitution: ${V}, ${V:-default}, ${V-default}, ${V:?error}, ${V?error}, $V, $$."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        value = env.get(name)
        if op in (":-", "-"):
            return arg if value is None or (op == ":-" and value == "") else value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise Fail(f"required variable {name}: {arg}")
            return value
        return value or ""
    return _INTERP.sub(sub, text)


def interpolate_raises(text, env):
    try:
        interpolate(text, env)
        return False
    except Fail:
        return True


def parse_unit(text):
    """{section: {key: [values]}} with line continuations joined."""
    sections, current = {}, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        m = re.fullmatch(r"\[([A-Za-z]+)\]", s)
        if m:
            current = sections.setdefault(m.group(1), {})
            continue
        need(current is not None and "=" in s, f"unit line outside a section or without '=': {s!r}")
        k, _, v = s.partition("=")
        current.setdefault(k.strip(), []).append(v.strip())
    return sections


def expand_unit_command(line, env, where):
    """systemd's expansion: ${V} is one word, $V splits on whitespace; a variable no env file defines is an error."""
    prefix = re.match(r"^[-@:+!]*", line).group(0)
    words = []
    for word in shlex.split(line[len(prefix):]):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            need(m.group(1) in env, f"{where}: ${m.group(1)} is not defined by its EnvironmentFile")
            words.extend(env[m.group(1)].split())
            continue

        def sub(mm):
            need(mm.group(1) in env, f"{where}: ${{{mm.group(1)}}} is not defined by its EnvironmentFile")
            return env[mm.group(1)]
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", sub, word))
    return words


def parse_dockerfile(text):
    """[{name, from, RUN: [...], COPY: [...], USER: [...]}] with ARG defaults substituted in FROM."""
    args, stages = {}, []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        instr, _, rest = s.partition(" ")
        instr = instr.upper()
        if instr == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        elif instr == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            need(m, f"bad FROM {rest!r}")
            image = re.sub(r"\$\{(\w+)\}", lambda mm: args.get(mm.group(1), ""), m.group(1))
            stages.append({"name": m.group(2), "from": image, "RUN": [], "COPY": [], "USER": []})
        elif stages and instr in ("RUN", "COPY", "USER"):
            stages[-1][instr].append(rest)
    return stages


def compose(ctx, env=None):
    text = read(ctx.path("deploy", "docker-compose.yml"))
    env = {"LAYERPIPE_MODEL_DIR": "/srv/models/gemma-4-12b", **(env or {})}
    return yaml.safe_load(interpolate(text, env)), env


def units(ctx):
    d = ctx.path("deploy", "systemd")
    return {f: parse_unit(read(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.endswith((".service", ".target"))}


def env_file(ctx, name):
    env = {}
    for line in read(ctx.path("deploy", "systemd", name)).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k] = v
    return env


def unit_commands(ctx, unit_name, unit, instance):
    """ExecStartPre/ExecStart argv with %i and the shipped env files' variables expanded."""
    env = {}
    for ef in unit["Service"].get("EnvironmentFile", []):
        optional = ef.startswith("-")
        base = os.path.basename(ef.lstrip("-")).replace("%i", instance)
        if os.path.isfile(ctx.path("deploy", "systemd", base)):
            env.update(env_file(ctx, base))
        else:
            need(optional, f"{unit_name}: EnvironmentFile {ef} is not shipped in deploy/systemd")
    cmds = {}
    for key in ("ExecStartPre", "ExecStart"):
        for line in unit["Service"].get(key, []):
            cmds.setdefault(key, []).append(expand_unit_command(line.replace("%i", instance), env, unit_name))
    return cmds, env
