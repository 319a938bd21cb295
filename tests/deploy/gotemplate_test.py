#!/usr/bin/env python3
"""Holds tests/deploy/gotemplate.py to Go's text/template: each case of gotemplate_cases.json (template, data,
and the output or error Go 1.19 + sprig produced for it) must render the same here, or fail the same way."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gotemplate  # noqa: E402


def main():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gotemplate_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    failed = 0
    for case in cases:
        renderer = gotemplate.Renderer()
        try:
            renderer.add_source(case["name"], case["template"])
            got = ("out", renderer.render(case["name"], gotemplate.helmify(case["data"])).replace("<no value>", ""))
        except gotemplate.TemplateError as e:
            got = ("error", str(e))
        if "out" in case:
            ok = got == ("out", case["out"])
            want = f"output {case['out']!r}"
        else:
            ok = got[0] == "error" and case["error"] in got[1]
            want = f"an error mentioning {case['error']!r}"
        print(f"{'PASS' if ok else 'FAIL'} {case['name']}" + ("" if ok else f": expected {want}, got {got[0]} {got[1]!r}"))
        failed += not ok
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
