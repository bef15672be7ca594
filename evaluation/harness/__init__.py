"""Programs that run inside the sandbox (`evaluation.sandbox`), kept as real files so linters and coverage see them.

The host reads each module's text (`Path(module.__file__).read_text()`) and hands it to a sandboxed
interpreter, where it runs as `__main__`. They are never imported for their effects: importing one only
defines names (the work happens under `if __name__ == "__main__":`); the host imports them statically so
that the import scan in `lopd.core.provenance` counts them as the host module's code.
"""
