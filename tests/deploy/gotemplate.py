"""A small evaluator of Go's text/template with the Helm and Sprig functions a chart commonly uses.

No helm binary is available where the tests run, yet a chart must not ship broken. This renders a chart's
templates the way `helm template` would, closely enough to parse the result as Kubernetes YAML and check it:
the whole action grammar (pipelines, parentheses, variables, if/else if/with/range/define/template, trim
markers, comments) and Go's semantics where charts usually go wrong: numbers from values are float64 (so
`printf "%d"` of one prints %!d(float64=...), `eq` of an int and a float64 is an error, a seven-digit number
prints as 1e+06), a missing map key is an error (like `helm lint --strict`), an unknown function is an error.
Functions outside the supported set fail loudly rather than render something plausible.
"""
import base64
import decimal
import hashlib
import json
import math
import os
import re

import yaml


class TemplateError(Exception):
    pass


# ---------------------------------------------------------------------------------------------------------
# Values as Helm sees them
# ---------------------------------------------------------------------------------------------------------

def helmify(value):
    """Helm reads values through JSON: every number becomes a float64."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {str(k): helmify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [helmify(v) for v in value]
    return value


def merge_values(base, override):
    """Helm's coalescing of user values over the chart's: maps merge, everything else is replaced."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return override
    out = dict(base)
    for k, v in override.items():
        out[k] = merge_values(base[k], v) if k in base and isinstance(v, dict) else v
    return out


_GO_YAML_SHORT_BOOLS = {"y": True, "Y": True, "n": False, "N": False}


class _NoDuplicatesLoader(yaml.SafeLoader):
    """Reads YAML as Kubernetes' go-yaml does: duplicate keys are errors, plain y/n are booleans."""


def _mapping_without_duplicates(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        keys.add(key)
    return loader.construct_mapping(node, deep=deep)


_NoDuplicatesLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_NoDuplicatesLoader.add_implicit_resolver("tag:yaml.org,2002:go-short-bool", re.compile(r"^[yYnN]$"), list("yYnN"))
_NoDuplicatesLoader.add_constructor("tag:yaml.org,2002:go-short-bool",
                                    lambda loader, node: _GO_YAML_SHORT_BOOLS[loader.construct_scalar(node)])


def load_yaml_documents(text):
    """YAML documents as Kubernetes would decode them: a duplicate key is an error, not a silent overwrite."""
    return [d for d in yaml.load_all(text, Loader=_NoDuplicatesLoader) if d is not None]


# ---------------------------------------------------------------------------------------------------------
# Go formatting
# ---------------------------------------------------------------------------------------------------------

def go_float(f):
    """fmt's %v of a float64: strconv's 'g' with the shortest digits, which switches to the exponent form
    below 1e-4 and from 1e+06 on (so a value of 1000000 renders as 1e+06, a classic chart bug)."""
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "0"
    # repr() gives the shortest digits that round-trip, as Go's shortest formatting does.
    _, digit_tuple, exponent = decimal.Decimal(repr(abs(f))).as_tuple()
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    point = len(digits) + exponent  # the decimal point sits after this many digits
    exp10 = point - 1
    neg = "-" if f < 0 else ""
    if exp10 < -4 or exp10 >= 6:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{body}e{'+' if exp10 >= 0 else '-'}{abs(exp10):02d}"
    if point <= 0:
        return neg + "0." + "0" * (-point) + digits
    if point >= len(digits):
        return neg + digits + "0" * (point - len(digits))
    return neg + digits[:point] + "." + digits[point:]


def go_str(v):
    """fmt's %v."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "[" + " ".join(go_str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_str(v[k])}" for k in sorted(v)) + "]"
    return str(v)


def go_type(v):
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    return type(v).__name__


def go_quote(s):
    return json.dumps(s, ensure_ascii=False)


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+))?([a-zA-Z%])")


def go_sprintf(fmt, *args):
    out, i, pos = [], 0, 0
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, verb = m.groups()
        if verb == "%":
            out.append("%")
            continue
        if i >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        a = args[i]
        i += 1
        if verb == "v":
            s = go_str(a)
        elif verb == "s":
            s = a if isinstance(a, str) else f"%!s({go_type(a)}={go_str(a)})"
        elif verb == "q":
            s = go_quote(a) if isinstance(a, str) else f"%!q({go_type(a)}={go_str(a)})"
        elif verb == "d":
            s = str(a) if isinstance(a, int) and not isinstance(a, bool) else f"%!d({go_type(a)}={go_str(a)})"
        elif verb in "fFeg":
            if isinstance(a, float):
                s = f"{a:.{int(prec) if prec else 6}{verb.lower()}}"
            else:
                s = f"%!{verb}({go_type(a)}={go_str(a)})"
        elif verb == "t":
            s = go_str(a) if isinstance(a, bool) else f"%!t({go_type(a)}={go_str(a)})"
        elif verb == "x":
            s = format(a, "x") if isinstance(a, int) else a.encode().hex() if isinstance(a, str) else f"%!x({go_type(a)})"
        else:
            raise TemplateError(f"printf verb %{verb} is not supported by this evaluator")
        if width:
            s = s.ljust(int(width)) if "-" in flags else s.rjust(int(width), "0" if "0" in flags else " ")
        out.append(s)
    out.append(fmt[pos:])
    if i < len(args):
        out.append("%!(EXTRA " + ", ".join(f"{go_type(a)}={go_str(a)}" for a in args[i:]) + ")")
    return "".join(out)


def go_sprint(*args):
    """fmt.Sprint: a space between operands when neither is a string."""
    out = []
    for i, a in enumerate(args):
        if i > 0 and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(go_str(a))
    return "".join(out)


def truth(v):
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, (str, list, dict, tuple)):
        return len(v) > 0
    return True


def _kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return None


def go_eq(a, *others):
    if not others:
        raise TemplateError("eq: missing argument for comparison")
    for b in others:
        if a is None or b is None:
            if a is b:
                return True
            raise TemplateError(f"eq: incompatible types for comparison ({go_type(a)} and {go_type(b)})")
        ka, kb = _kind(a), _kind(b)
        if ka is None or kb is None:
            raise TemplateError(f"eq: invalid type for comparison ({go_type(a)}, {go_type(b)})")
        if ka != kb:
            raise TemplateError(f"eq: incompatible types for comparison ({go_type(a)} and {go_type(b)})")
        if a == b:
            return True
    return False


def go_less(a, b, name):
    ka, kb = _kind(a), _kind(b)
    if ka is None or ka != kb or ka == "bool":
        raise TemplateError(f"{name}: incompatible types for comparison ({go_type(a)} and {go_type(b)})")
    return a < b


# ---------------------------------------------------------------------------------------------------------
# Sprig / Helm functions
# ---------------------------------------------------------------------------------------------------------

def strval(v):
    return v if isinstance(v, str) else go_str(v)


def empty(v):
    return not truth(v)


def to_int(v):
    if v is None:
        return 0
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, str):
        try:
            return int(float(v)) if re.fullmatch(r"\s*-?\d+(\.\d*)?\s*", v) else 0
        except ValueError:
            return 0
    return 0


def _yaml_ready(v):
    """toYaml marshals through Go: float64s that are whole numbers print without a fraction."""
    if isinstance(v, float) and not isinstance(v, bool):
        if v.is_integer() and abs(v) < 1e21:
            text = go_float(v)
            return int(v) if "e" not in text else v
        return v
    if isinstance(v, dict):
        return {k: _yaml_ready(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_yaml_ready(x) for x in v]
    return v


class _GoYamlDumper(yaml.SafeDumper):
    """go-yaml quotes the scalars that need it with double quotes where PyYAML uses single ones, and also
    quotes y/n, which it (YAML 1.1) reads as booleans."""

    def choose_scalar_style(self):
        style = super().choose_scalar_style()
        if style == "'" or (style == "" and self.event.value in _GO_YAML_SHORT_BOOLS and self.event.implicit[0]):
            return '"'
        return style


def to_yaml(v):
    if v is None:
        return "null"
    return yaml.dump(_yaml_ready(v), Dumper=_GoYamlDumper, default_flow_style=False, sort_keys=True,
                     allow_unicode=True, width=1 << 20).rstrip("\n")


def indent(n, s):
    pad = " " * to_int(n)
    return pad + strval(s).replace("\n", "\n" + pad)


def trunc(n, s):
    n, s = to_int(n), strval(s)
    if n < 0:
        return s[max(len(s) + n, 0):]
    return s[:n]


def required(msg, v):
    if v is None or (isinstance(v, str) and v == ""):
        raise TemplateError(f"required: {msg}")
    return v


def fail(msg):
    raise TemplateError(f"fail: {msg}")


def sprig_default(d, *given):
    if not given or empty(given[0]):
        return d
    return given[0]


def sprig_append(lst, v):
    if not isinstance(lst, list):
        raise TemplateError(f"append: cannot append to {go_type(lst)}")
    return lst + [v]


def sprig_dict(*kv):
    if len(kv) % 2:
        kv = kv + ("",)
    return {strval(kv[i]): kv[i + 1] for i in range(0, len(kv), 2)}


def sprig_join(sep, v):
    if isinstance(v, list):
        return strval(sep).join(strval(x) for x in v if x is not None)
    return strval(v)


def go_index(coll, *keys):
    for k in keys:
        if isinstance(coll, dict):
            coll = coll.get(k)
        elif isinstance(coll, list):
            coll = coll[to_int(k)]
        else:
            raise TemplateError(f"index of {go_type(coll)}")
    return coll


def sprig_set(d, k, v):
    d[k] = v
    return d


FUNCTIONS = {
    "default": sprig_default,
    "empty": empty,
    "coalesce": lambda *a: next((x for x in a if truth(x)), None),
    "ternary": lambda a, b, c: a if truth(c) else b,
    "quote": lambda *a: " ".join(go_quote(strval(x)) for x in a if x is not None),
    "squote": lambda *a: " ".join("'" + strval(x) + "'" for x in a if x is not None),
    "printf": go_sprintf,
    "print": go_sprint,
    "println": lambda *a: " ".join(go_str(x) for x in a) + "\n",
    "toString": strval,
    "trunc": trunc,
    "trimSuffix": lambda suf, s: strval(s)[:-len(suf)] if suf and strval(s).endswith(suf) else strval(s),
    "trimPrefix": lambda pre, s: strval(s)[len(pre):] if pre and strval(s).startswith(pre) else strval(s),
    "trim": lambda s: strval(s).strip(),
    "lower": lambda s: strval(s).lower(),
    "upper": lambda s: strval(s).upper(),
    "replace": lambda old, new, s: strval(s).replace(old, new),
    "contains": lambda sub, s: strval(sub) in strval(s),
    "hasPrefix": lambda pre, s: strval(s).startswith(strval(pre)),
    "hasSuffix": lambda suf, s: strval(s).endswith(strval(suf)),
    "indent": indent,
    "nindent": lambda n, s: "\n" + indent(n, s),
    "toYaml": to_yaml,
    "toJson": lambda v: json.dumps(_yaml_ready(v), separators=(",", ":"), sort_keys=True),
    "required": required,
    "fail": fail,
    "eq": go_eq,
    "ne": lambda a, b: not go_eq(a, b),
    "lt": lambda a, b: go_less(a, b, "lt"),
    "le": lambda a, b: go_less(a, b, "le") or go_eq(a, b),
    "gt": lambda a, b: go_less(b, a, "gt"),
    "ge": lambda a, b: go_less(b, a, "ge") or go_eq(a, b),
    "not": lambda v: not truth(v),
    "list": lambda *a: list(a),
    "append": sprig_append,
    "join": sprig_join,
    "until": lambda n: list(range(to_int(n))),
    "int": to_int,
    "int64": to_int,
    "float64": lambda v: float(v) if isinstance(v, (int, float)) else 0.0,
    "add": lambda *a: sum(to_int(x) for x in a),
    "sub": lambda a, b: to_int(a) - to_int(b),
    "mul": lambda *a: math.prod(to_int(x) for x in a),
    "dict": sprig_dict,
    "set": sprig_set,
    "get": lambda d, k: d.get(k, ""),
    "hasKey": lambda d, k: k in d,
    "len": lambda v: len(v),
    "index": go_index,
    "sha256sum": lambda s: hashlib.sha256(strval(s).encode()).hexdigest(),
    "b64enc": lambda s: base64.b64encode(strval(s).encode()).decode(),
    "b64dec": lambda s: base64.b64decode(strval(s)).decode(),
}
LAZY = {"and", "or"}  # Go evaluates their arguments only as far as needed


# ---------------------------------------------------------------------------------------------------------
# Lexing and parsing
# ---------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<char>'(?:[^'\\\n]|\\.)+')
  | (?P<decl>:=)
  | (?P<assign>=)
  | (?P<pipe>\|)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
  | (?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?))
  | (?P<var>\$[A-Za-z0-9_]*)
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+)
  | (?P<dot>\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
""", re.VERBOSE)


def lex_action(body, where):
    tokens, pos, prev_end = [], 0, -1
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if not m:
            raise TemplateError(f"{where}: unexpected {body[pos:pos + 10]!r} in action")
        kind = m.lastgroup
        if kind != "ws":
            tokens.append((kind, m.group(), pos == prev_end))  # adjacent: no space before it
        pos = m.end()
        prev_end = pos if kind != "ws" else -1
    # "field" right after ")" or a variable without a space chains onto it.
    return tokens


def split_source(src, name):
    """Text and action pieces with trim markers applied: [(kind, text, line)]."""
    pieces, pos = [], 0
    trim_next = False
    while True:
        start = src.find("{{", pos)
        text = src[pos:] if start < 0 else src[pos:start]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if start < 0:
            if text:
                pieces.append(("text", text, src.count("\n", 0, pos) + 1))
            return pieces
        line = src.count("\n", 0, start) + 1
        inner_start = start + 2
        if src.startswith("-", inner_start) and inner_start + 1 < len(src) and src[inner_start + 1] in " \t\r\n":
            text = text.rstrip(" \t\r\n")
            inner_start += 1
        if text:
            pieces.append(("text", text, src.count("\n", 0, pos) + 1))
        # Find the closing braces outside quotes and comments.
        i, quote = inner_start, None
        while True:
            if i >= len(src):
                raise TemplateError(f"{name}:{line}: unclosed action")
            c = src[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 2
                    continue
                if c == quote:
                    quote = None
            elif src.startswith("/*", i):
                end = src.find("*/", i + 2)
                if end < 0:
                    raise TemplateError(f"{name}:{line}: unclosed comment")
                i = end + 2
                continue
            elif c in "\"`":
                quote = c
            elif src.startswith("}}", i):
                break
            i += 1
        body = src[inner_start:i]
        trim_next = False
        if body.endswith("-") and len(body) >= 2 and body[-2] in " \t\r\n":
            body = body[:-1]
            trim_next = True
        stripped = body.strip()
        if not (stripped.startswith("/*") and stripped.endswith("*/")):
            pieces.append(("action", stripped, line))
        pos = i + 2


class Parser:
    def __init__(self, name, src):
        self.name = name
        self.pieces = split_source(src, name)
        self.i = 0
        self.defines = {}

    def where(self, line):
        return f"{self.name}:{line}"

    def parse(self):
        nodes, end = self.parse_list(top=True)
        if end is not None:
            raise TemplateError(f"{self.where(end[2])}: unexpected {{{{{end[1]}}}}}")
        return nodes

    def parse_list(self, top=False):
        """Nodes up to an {{end}} / {{else ...}} (returned as the terminator) or the end of the source."""
        nodes = []
        while self.i < len(self.pieces):
            kind, text, line = self.pieces[self.i]
            self.i += 1
            if kind == "text":
                nodes.append(("text", text))
                continue
            word = text.split(None, 1)[0] if text else ""
            rest = text[len(word):].strip()
            where = self.where(line)
            if word in ("end", "else"):
                if top:
                    raise TemplateError(f"{where}: unexpected {{{{{text}}}}}")
                return nodes, (word, rest, line)
            if word in ("if", "with", "range"):
                nodes.append(self.parse_block(word, rest, line))
            elif word == "define":
                tokens = lex_action(rest, where)
                if len(tokens) != 1 or tokens[0][0] not in ("str", "raw"):
                    raise TemplateError(f"{where}: define needs a quoted name")
                body, term = self.parse_list()
                if term is None or term[0] != "end":
                    raise TemplateError(f"{where}: define without end")
                self.defines[self.literal(tokens[0])] = body
            elif word in ("template", "block"):
                tokens = lex_action(rest, where)
                if not tokens or tokens[0][0] not in ("str", "raw"):
                    raise TemplateError(f"{where}: {word} needs a quoted name")
                pipe = self.parse_pipeline(tokens[1:], where) if len(tokens) > 1 else None
                nodes.append(("template", self.literal(tokens[0]), pipe, where))
            elif word in ("break", "continue"):
                raise TemplateError(f"{where}: {word} is not supported by this evaluator")
            else:
                nodes.append(("action", self.parse_pipeline(lex_action(text, where), where, allow_decl=True), where))
        if not top:
            raise TemplateError(f"{self.name}: missing {{{{end}}}}")
        return nodes, None

    def parse_block(self, word, rest, line):
        where = self.where(line)
        pipe = self.parse_pipeline(lex_action(rest, where), where, allow_decl=True)
        body, term = self.parse_list()
        else_nodes = None
        if term is None:
            raise TemplateError(f"{where}: {word} without end")
        if term[0] == "else":
            if term[1]:
                # "else if ..." / "else with ...": the rest is a nested block sharing this one's end.
                sub_word = term[1].split(None, 1)[0]
                if sub_word not in ("if", "with"):
                    raise TemplateError(f"{self.where(term[2])}: unexpected else {term[1]}")
                else_nodes = [self.parse_block(sub_word, term[1][len(sub_word):].strip(), term[2])]
                return (word, pipe, body, else_nodes, where)
            else_nodes, term = self.parse_list()
            if term is None or term[0] != "end":
                raise TemplateError(f"{where}: {word} ... else without end")
        return (word, pipe, body, else_nodes, where)

    @staticmethod
    def literal(tok):
        kind, text, _ = tok
        if kind == "raw":
            return text[1:-1]
        if kind == "str":
            return json.loads(text) if "\\x" not in text else bytes(text[1:-1], "utf-8").decode("unicode_escape")
        raise TemplateError(f"not a string literal: {text}")

    def parse_pipeline(self, tokens, where, allow_decl=False):
        decl, op = [], None
        if allow_decl and tokens and tokens[0][0] == "var":
            j, names = 0, []
            while j < len(tokens) and tokens[j][0] == "var":
                names.append(tokens[j][1])
                if j + 1 < len(tokens) and tokens[j + 1][0] == "comma":
                    j += 2
                    continue
                j += 1
                break
            if j < len(tokens) and tokens[j][0] in ("decl", "assign") and all("." not in n for n in names):
                decl, op = names, tokens[j][0]
                tokens = tokens[j + 1:]
        commands, pos = [], 0
        while True:
            cmd, pos = self.parse_command(tokens, pos, where)
            commands.append(cmd)
            if pos >= len(tokens):
                break
            if tokens[pos][0] != "pipe":
                raise TemplateError(f"{where}: unexpected {tokens[pos][1]!r}")
            pos += 1
        return {"decl": decl, "op": op, "commands": commands}

    def parse_command(self, tokens, pos, where):
        args = []
        while pos < len(tokens) and tokens[pos][0] not in ("pipe", "rparen"):
            node, pos = self.parse_operand(tokens, pos, where)
            args.append(node)
        if not args:
            raise TemplateError(f"{where}: empty command")
        return args, pos

    def parse_operand(self, tokens, pos, where):
        kind, text, _ = tokens[pos]
        pos += 1
        if kind == "lparen":
            inner, depth, j = [], 1, pos
            while j < len(tokens):
                if tokens[j][0] == "lparen":
                    depth += 1
                elif tokens[j][0] == "rparen":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= len(tokens):
                raise TemplateError(f"{where}: unclosed parenthesis")
            node = ("pipe", self.parse_pipeline(tokens[pos:j], where))
            pos = j + 1
        elif kind == "field":
            node = ("field", text[1:].split("."))
        elif kind == "dot":
            node = ("dot",)
        elif kind == "var":
            node = ("var", text)
        elif kind in ("str", "raw"):
            node = ("lit", self.literal(tokens[pos - 1]))
        elif kind == "char":
            node = ("lit", ord(json.loads('"' + text[1:-1] + '"')))
        elif kind == "num":
            node = ("lit", int(text, 0) if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", text) else float(text))
        elif kind == "ident":
            if text in ("true", "false"):
                node = ("lit", text == "true")
            elif text == "nil":
                node = ("lit", None)
            else:
                if text not in FUNCTIONS and text not in LAZY and text not in ("include", "tpl"):
                    raise TemplateError(f"{where}: function {text!r} not defined")
                node = ("func", text)
        else:
            raise TemplateError(f"{where}: unexpected {text!r}")
        # Field chains glued to the operand: $x.a.b, (pipeline).a
        while pos < len(tokens) and tokens[pos][0] == "field" and tokens[pos][2] and node[0] in ("var", "pipe", "chain"):
            node = ("chain", node, tokens[pos][1][1:].split("."))
            pos += 1
        return node, pos


# ---------------------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------------------

_MISSING = object()


class Renderer:
    def __init__(self):
        self.defines = {}
        self.depth = 0

    def add_source(self, name, src):
        parser = Parser(name, src)
        nodes = parser.parse()
        self.defines.update(parser.defines)
        self.defines[name] = nodes
        return nodes

    def render(self, name, data):
        if name not in self.defines:
            raise TemplateError(f"no template {name!r}")
        self.depth += 1
        if self.depth > 100:
            raise TemplateError(f"template {name!r}: recursion too deep")
        try:
            out = []
            self.exec_list(self.defines[name], data, [{"$": data}], out)
            return "".join(out)
        finally:
            self.depth -= 1

    # -- control ----------------------------------------------------------------------------------------
    def exec_list(self, nodes, dot, scopes, out):
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "action":
                value = self.eval_pipeline(node[1], dot, scopes, node[2])
                if not node[1]["decl"]:
                    out.append("" if value is None else go_str(value))
            elif kind == "template":
                data = self.eval_pipeline(node[2], dot, scopes, node[3]) if node[2] else None
                out.append(self.render(node[1], data))
            elif kind in ("if", "with"):
                _, pipe, body, else_nodes, where = node
                scopes.append({})
                try:
                    value = self.eval_pipeline(pipe, dot, scopes, where)
                    if truth(value):
                        self.exec_list(body, value if kind == "with" else dot, scopes, out)
                    elif else_nodes is not None:
                        self.exec_list(else_nodes, dot, scopes, out)
                finally:
                    scopes.pop()
            elif kind == "range":
                self.exec_range(node, dot, scopes, out)
            else:
                raise TemplateError(f"unknown node {kind}")

    def exec_range(self, node, dot, scopes, out):
        _, pipe, body, else_nodes, where = node
        decl = pipe["decl"]
        value = self.eval_pipeline(dict(pipe, decl=[], op=None), dot, scopes, where)
        if isinstance(value, dict):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list):
            items = list(enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [(i, i) for i in range(value)]
        elif value is None:
            items = []
        else:
            raise TemplateError(f"{where}: range can't iterate over {go_str(value)}")
        if not items:
            if else_nodes is not None:
                scopes.append({})
                try:
                    self.exec_list(else_nodes, dot, scopes, out)
                finally:
                    scopes.pop()
            return
        for key, elem in items:
            scope = {}
            if len(decl) == 1:
                scope[decl[0]] = elem
            elif len(decl) == 2:
                scope[decl[0]], scope[decl[1]] = key, elem
            scopes.append(scope)
            try:
                self.exec_list(body, elem, scopes, out)
            finally:
                scopes.pop()

    # -- expressions ------------------------------------------------------------------------------------
    def eval_pipeline(self, pipe, dot, scopes, where):
        value = _MISSING
        for cmd in pipe["commands"]:
            value = self.eval_command(cmd, dot, scopes, where, value)
        if pipe["decl"]:
            if pipe["op"] == "decl":
                for name in pipe["decl"]:
                    scopes[-1][name] = value
            else:
                name = pipe["decl"][0]
                for scope in reversed(scopes):
                    if name in scope:
                        scope[name] = value
                        break
                else:
                    raise TemplateError(f"{where}: undefined variable {name}")
        return value

    def eval_command(self, cmd, dot, scopes, where, piped):
        head, args = cmd[0], cmd[1:]
        if head[0] == "func":
            name = head[1]
            if name in LAZY:
                thunks = [lambda a=a: self.eval_arg(a, dot, scopes, where) for a in args]
                if piped is not _MISSING:
                    thunks.append(lambda: piped)
                result = None
                for t in thunks:
                    result = t()
                    if truth(result) == (name == "or"):
                        return result
                return result
            values = [self.eval_arg(a, dot, scopes, where) for a in args]
            if piped is not _MISSING:
                values.append(piped)
            try:
                if name == "include":
                    if len(values) != 2:
                        raise TemplateError("include needs a name and a value")
                    return self.render(values[0], values[1])
                if name == "tpl":
                    raise TemplateError("tpl is not supported by this evaluator")
                return FUNCTIONS[name](*values)
            except TemplateError as e:
                raise TemplateError(f"{where}: {e}") from None
            except TypeError as e:
                raise TemplateError(f"{where}: wrong arguments for {name}: {e}") from None
        value = self.eval_arg(head, dot, scopes, where)
        if callable(value):
            values = [self.eval_arg(a, dot, scopes, where) for a in args]
            if piped is not _MISSING:
                values.append(piped)
            return value(*values)
        if args or piped is not _MISSING:
            raise TemplateError(f"{where}: can't give argument to non-function {go_str(value)}")
        return value

    def eval_arg(self, node, dot, scopes, where):
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "dot":
            return dot
        if kind == "field":
            return self.walk(dot, node[1], where, ".")
        if kind == "var":
            for scope in reversed(scopes):
                if node[1] in scope:
                    return scope[node[1]]
            raise TemplateError(f"{where}: undefined variable {node[1]}")
        if kind == "pipe":
            return self.eval_pipeline(node[1], dot, scopes, where)
        if kind == "chain":
            base = node[1][1] if node[1][0] == "var" else "(...)"
            return self.walk(self.eval_arg(node[1], dot, scopes, where), node[2], where, base)
        if kind == "func":
            return self.eval_command([node], dot, scopes, where, _MISSING)
        raise TemplateError(f"{where}: cannot evaluate {node}")

    @staticmethod
    def walk(value, names, where, prefix):
        path = prefix
        for name in names:
            if isinstance(value, dict):
                if name not in value:
                    raise TemplateError(f"{where}: map has no entry for key \"{name}\" (in {path})")
                value = value[name]
            elif value is None:
                raise TemplateError(f"{where}: nil pointer evaluating interface {{}}.{name} (in {path})")
            else:
                raise TemplateError(f"{where}: can't evaluate field {name} in type {go_type(value)}")
            path = f"{path}.{name}" if path != "." else f".{name}"
        return value


# ---------------------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------------------

def render_chart(chart_dir, values_overrides=(), release="layerpipe", namespace="default"):
    """`helm template`: {template path: rendered text} for every template (partials excluded, NOTES.txt kept).

    values_overrides: dicts (already loaded) merged in order over values.yaml.
    """
    with open(os.path.join(chart_dir, "Chart.yaml"), encoding="utf-8") as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(chart_dir, "values.yaml"), encoding="utf-8") as f:
        values = yaml.safe_load(f) or {}
    for o in values_overrides:
        values = merge_values(values, o)
    name = chart["name"]

    def files_get(path):
        full = os.path.join(chart_dir, path)
        if not os.path.isfile(full):
            return ""
        with open(full, encoding="utf-8") as fh:
            return fh.read()

    top = {
        "Values": helmify(values),
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True,
                    "IsUpgrade": False, "Revision": 1.0},
        "Chart": {"Name": name, "Version": chart["version"], "AppVersion": chart.get("appVersion", ""),
                  "Description": chart.get("description", "")},
        "Capabilities": {"KubeVersion": {"Version": "v1.30.0", "Major": "1", "Minor": "30"}},
        "Files": {"Get": files_get},
    }
    renderer = Renderer()
    templates_dir = os.path.join(chart_dir, "templates")
    sources = []
    for root, _, files in os.walk(templates_dir):
        for fname in sorted(files):
            full = os.path.join(root, fname)
            rel = os.path.relpath(full, chart_dir).replace(os.sep, "/")
            tname = f"{name}/{rel}"
            with open(full, encoding="utf-8") as f:
                renderer.add_source(tname, f.read())
            sources.append(tname)
    out = {}
    for tname in sorted(sources):
        base = os.path.basename(tname)
        if base.startswith("_"):
            continue
        data = dict(top, Template={"Name": tname, "BasePath": f"{name}/templates"})
        text = renderer.render(tname, data)
        out[tname] = text.replace("<no value>", "")
    return out
