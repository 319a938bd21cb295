"""helm/layerpipe/files/check-model.sh (the init container, the units' ExecStartPre and the images'
layerpipe-check-model) accepts complete checkpoints (fake layouts, and a generated one with the built binaries)
and rejects incomplete ones; --tokenizer loads tokenizer.json through `layerpipe tokenize`."""
import json
import os
import shutil
import subprocess
import tempfile

from util import TINY_CHECKPOINT, need, read


def check_model_script(ctx):
    script = os.path.join(ctx.chart, "files", "check-model.sh")
    need(read(script).startswith("#!/bin/sh"), "check-model.sh must be a POSIX sh script")
    base = tempfile.mkdtemp(dir=ctx.work, prefix="check-model-")
    env = dict(os.environ, PATH=f"{ctx.bin}:{os.environ.get('PATH', '')}" if ctx.bin else os.environ.get("PATH", ""))

    def run(*args):
        p = subprocess.run(["/bin/sh", script, *args], capture_output=True, text=True, timeout=60, env=env)
        return p.returncode, p.stdout + p.stderr

    def fake(name, shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"), index=True):
        d = os.path.join(base, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"text_config": {"num_hidden_layers": 48}}, f)
        if index:
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": 1}, "weight_map": {f"t{i}": s for i, s in enumerate(shards * 2)}}, f)
        for s in shards:
            with open(os.path.join(d, s), "wb") as f:
                f.write(b"\x08\0\0\0\0\0\0\0{}      ")
        return d

    ok = fake("sharded")
    rc, out = run(ok)
    need(rc == 0 and "2 safetensors" in out, f"a complete sharded checkpoint is rejected: {out}")
    single = fake("single", shards=("model.safetensors",), index=False)
    need(run(single)[0] == 0, "a single-file checkpoint is rejected")
    cases = {
        "a missing shard": (lambda d: os.remove(os.path.join(d, "model-00002-of-00002.safetensors")),
                            "model-00002-of-00002.safetensors is missing"),
        "an empty shard": (lambda d: open(os.path.join(d, "model-00001-of-00002.safetensors"), "w").close(), "is empty"),
        "no config.json": (lambda d: os.remove(os.path.join(d, "config.json")), "config.json is missing"),
        "a config.json without layers": (lambda d: open(os.path.join(d, "config.json"), "w").write("{}"), "num_hidden_layers"),
        "an index naming no shard": (lambda d: open(os.path.join(d, "model.safetensors.index.json"), "w").write("{}"),
                                     "names no .safetensors"),
        "a directory as generation_config.json": (lambda d: os.mkdir(os.path.join(d, "generation_config.json")),
                                                  "generation_config.json is missing (or not a regular file)"),
    }
    for i, (what, (breakit, message)) in enumerate(cases.items()):
        d = fake(f"broken{i}")
        breakit(d)
        rc, out = run(d)
        need(rc == 1 and message in out, f"{what}: exit {rc}, {out.strip()!r} (expected 1 and {message!r})")
    rc, out = run(os.path.join(base, "absent"))
    need(rc == 1 and "not a directory" in out, "an absent directory is not reported")
    need(run()[0] == 2 and run("--tokenizer")[0] == 2 and run("--bogus", ok)[0] == 2, "bad usage must exit 2")
    weightless = fake("weightless", shards=(), index=False)
    rc, out = run("--no-weights", weightless)
    need(rc == 0, f"--no-weights wants weights: {out}")
    need(run(weightless)[0] == 1, "a checkpoint without weights passes")
    os.remove(os.path.join(weightless, "config.json"))
    need(run("--no-weights", weightless)[0] == 1, "--no-weights passes without config.json")
    rc, out = run("--tokenizer", ok)
    need(rc == 1 and "tokenizer.json is missing" in out, "--tokenizer without tokenizer.json passes")
    note = "fake layouts"
    if ctx.bin:
        # A real generated checkpoint, and the tokenizer check through `layerpipe tokenize`.
        real = os.path.join(base, "real")
        subprocess.run([os.path.join(ctx.bin, "layerpipe"), "make-checkpoint", "--out", real, *TINY_CHECKPOINT,
                        "--shards", "3"], check=True, capture_output=True, timeout=120)
        rc, out = run(real)
        need(rc == 0 and "3 safetensors" in out, f"a generated 3-shard checkpoint is rejected: {out}")
        with open(os.path.join(real, "tokenizer.json"), "w") as f:
            f.write('{"model": {"type": "BPE"}}')
        rc, out = run("--tokenizer", real)
        need(rc == 1 and "does not load" in out, f"a broken tokenizer.json passes --tokenizer: {out}")
        tok = ctx.path("third_party", "npm", "node_modules", "@lenml", "tokenizer-gemma3", "models", "tokenizer.json")
        if os.path.isfile(tok):
            shutil.copy(tok, os.path.join(real, "tokenizer.json"))
            rc, out = run("--tokenizer", real)
            need(rc == 0, f"the real Gemma tokenizer.json fails --tokenizer: {out}")
            rc, out = run("--no-weights", "--tokenizer", real)
            need(rc == 0, f"the coordinator's check fails: {out}")
            note = "fake layouts, a generated checkpoint, the real tokenizer"
        else:
            note = "fake layouts, a generated checkpoint (no reference tokenizer.json: scripts/fetch_tokenizer.sh)"
    shutil.rmtree(base, ignore_errors=True)
    return note
