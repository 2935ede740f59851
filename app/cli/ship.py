"""`nightschool export | deploy | serve | exports | deployments`: shipping a checkpoint from the terminal (rollback is
`nightschool rollback`, shared with the judge)."""
from __future__ import annotations

from app.cli.common import WorkerProgress, open_store, print_json, refusals, row_dict
from app.core.ship.config import DEFAULT_QUANT, QUANTS


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def print_export(exp) -> None:
    print(f"export #{exp.row.id} of {exp.row.label} in {exp.folder}")
    for f in exp.files:
        verdict = "smoke test passed" if f.get("ok") else f"SMOKE TEST FAILED: {f.get('why')}"
        print(f"  {f['file']}  {f['quant']:7} {_size(f['size']):>9}  sha256 {f['sha256'][:12]}  "
              f"loads in {f.get('load_s', 0):.2f} s  {f.get('tokens_per_s', 0):.0f} tok/s  {verdict}")
        if f.get("answer"):
            print(f"    answer: {f['answer'][:100]!r} ({f.get('finish_reason')})")
    if exp.row.lora_file:
        print(f"  {exp.row.lora_file}  LoRA only (llama.cpp --lora / Llama(lora_path=…) on the base GGUF)")
    print(f"  chat template embedded (sha256 {exp.row.template_sha256[:12]}), stop: {', '.join(exp.meta['stop'])}")


def cmd_export(args) -> int:
    def go() -> int:
        from app.core.judge.records import resolve
        from app.core.ship import exports, lmstudio, ollama

        view, store = WorkerProgress(), open_store()
        try:
            exp = exports.export(store, resolve(store, args.checkpoint), args.quant or [DEFAULT_QUANT],
                           lora=not args.no_lora, sink=view, force=args.force)
        finally:
            view.close()
        print_export(exp)
        gguf = exp.path((args.quant or [DEFAULT_QUANT])[0])
        if args.lmstudio is not None:
            where = lmstudio.export(gguf, gguf.name.split(".")[0], args.lmstudio or None)
            print(f"LM Studio: {where}")
        if args.ollama:
            meta = exp.meta
            modelfile = ollama.write(exp.folder, gguf, meta["template"], meta["eos_token"], meta["bos_token"],
                                     args.ollama)
            result = ollama.register(modelfile, args.ollama)
            print(f"Modelfile: {modelfile}\n{result.message}")
            if not result.ok:
                return 1
        return 0
    return refusals(go)


def cmd_deploy(args) -> int:
    def go() -> int:
        from app.core.judge.records import resolve
        from app.core.ship import deploy

        view, store = WorkerProgress(), open_store()
        try:
            done = deploy.deploy(store, resolve(store, args.checkpoint), args.quant, sink=view, port=args.port)
        finally:
            view.close()
        st = done.state
        print(f"deployed {done.export.row.label} ({done.row.quant}): serving {done.row.file} at {st['url']}")
        print(f"  API key in {_key_path()}; previous model kept for rollback: "
              f"{(st.get('standby') or {}).get('name') or 'none'} (nightschool rollback)")
        return 0
    return refusals(go)


def _key_path():
    from app.core.ship import serving as server

    server.api_key()
    return server.serve_dir() / "api_key"


def cmd_serve(args) -> int:
    def go() -> int:
        from app.core.ship import deploy, serving as server

        if args.action == "stop":
            print("stopped" if server.stop() else "the server was not running")
            return 0
        if args.action == "start":
            server.set_desired(True)
            st = deploy.ensure_serving(open_store(), args.port)
            if st is None:
                print("nothing is deployed yet: nightschool deploy CHECKPOINT")
                return 2
        st = server.state()
        if st is None:
            print("the model server is stopped (nightschool serve start)")
            return 0
        cur, prev = st["current"], st.get("standby")
        print(f"serving {cur['name']} ({cur.get('quant') or '?'}) at {st['url']} — pid {st['pid']}")
        print(f"  previous model loaded for rollback: {prev['name'] if prev else 'none'}")
        print(f"  API key: {_key_path()}  (curl -H \"Authorization: Bearer $(cat {_key_path()})\" "
              f"{st['url']}/models)")
        return 0
    return refusals(go)


def cmd_exports(args) -> int:
    from app.core.ship import exports

    if getattr(args, "json", False):
        return print_json([{**row_dict(exp.row), "folder": exp.folder} for exp in exports.history(open_store())])
    for exp in exports.history(open_store()):
        files = ", ".join(f"{f['quant']}{'' if f.get('ok') else ' (smoke failed)'}" for f in exp.files)
        print(f"#{exp.row.id:<4} {exp.row.created_at:%Y-%m-%d %H:%M}  {exp.row.label:30} {files}")
    return 0


def cmd_deployments(args) -> int:
    from app.core.ship import deploy

    if getattr(args, "json", False):
        return print_json([row_dict(row) for row in deploy.history(open_store())])
    for row in deploy.history(open_store()):
        print(f"#{row.id:<4} {row.created_at:%Y-%m-%d %H:%M}  {row.action:8} {row.file:40} {row.note}")
    return 0


def register(sub) -> None:
    ex = sub.add_parser("export", help="a checkpoint (or 'base') to GGUF: merged, quantized, smoke-tested, + LoRA GGUF")
    ex.add_argument("checkpoint", help="'#ID' (nightschool checkpoints), a job id, a folder, or 'base'")
    ex.add_argument("--quant", action="append", choices=sorted(QUANTS),
                    help=f"repeatable; default {DEFAULT_QUANT}")
    ex.add_argument("--no-lora", action="store_true", help="skip the LoRA-only GGUF")
    ex.add_argument("--force", action="store_true", help="export again even if the same export exists")
    ex.add_argument("--ollama", metavar="NAME", help="also write a Modelfile and register it with `ollama create`")
    ex.add_argument("--lmstudio", nargs="?", const="", metavar="DIR", help="also place it in LM Studio's models folder")
    ex.set_defaults(func=cmd_export)
    de = sub.add_parser("deploy", help="gate → export → smoke test → the built-in server serves it (rollback-able)")
    de.add_argument("checkpoint")
    de.add_argument("--quant", default=DEFAULT_QUANT, choices=sorted(QUANTS))
    de.add_argument("--port", type=int, help="port when the server starts (default 8765)")
    de.set_defaults(func=cmd_deploy)
    se = sub.add_parser("serve", help="the built-in OpenAI-compatible server: start (default), status, stop")
    se.add_argument("action", nargs="?", default="start", choices=["start", "status", "stop"])
    se.add_argument("--port", type=int)
    se.set_defaults(func=cmd_serve)
    for name, text, func in (("exports", "GGUF exports", cmd_exports),
                             ("deployments", "what was served, in order", cmd_deployments)):
        p = sub.add_parser(name, help=text)
        p.add_argument("--json", action="store_true", help=f"print the {name} as JSON")
        p.set_defaults(func=func)
