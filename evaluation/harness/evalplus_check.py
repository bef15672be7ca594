"""The EvalPlus harness: runs inside the sandbox as main.py (`evaluation.evalplus_bench._run_sample`).

Read as text by the host; never imported for its effects (importing it only defines names). The nonce
arrives on stdin (read before any model code runs); the task (payload.json) and evalplus' expected outputs
(expected.b64) arrive in the workdir and are removed once read. The verdict, one "<nonce> <json>" line, is
printed by this process after evalplus' forked child has finished.
"""
import base64
import io
import json
import os
import pickle
import sys

DATA_GLOBALS = {("builtins", "complex"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"),
                ("collections", "Counter"), ("collections", "OrderedDict"), ("collections", "deque")}
"""What EvalPlus' inputs and expected outputs may be built from (its data use complex and Counter; the rest are the
other plain containers): a pickle naming anything else, a function say, is refused."""


class DataUnpickler(pickle.Unpickler):
    """Unpickles plain data only (Python 3 protocols), so a tampered cache file cannot run code on load."""

    def find_class(self, module, name):
        if (module, name) not in DATA_GLOBALS:
            raise pickle.UnpicklingError(f"refused {module}.{name}: not a plain data type")
        return super().find_class(module, name)


def loads(data):
    return DataUnpickler(io.BytesIO(data)).load()


def emit(marker, obj):
    sys.stdout.write("\n" + marker + " " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def flag_time_limits(ev):
    """With fast_check, evalplus reports a test that ran past its per-test time limit as a plain "fail". Wrap its
    time limit so that such an overrun is flagged (in memory its forked child shares): the host then re-checks a
    sample that failed only by time, which load on the machine can cause. Returns the flag."""
    import contextlib
    import multiprocessing

    from evalplus.eval.utils import TimeoutException

    fired = multiprocessing.Value("b", 0, lock=False)
    real = ev.time_limit

    @contextlib.contextmanager
    def flagged(seconds):
        try:
            with real(seconds):
                yield
        except TimeoutException:
            fired.value = 1
            raise

    ev.time_limit = flagged
    return fired


def main():
    marker = sys.stdin.readline().strip()
    os.environ["EVALPLUS_MAX_MEMORY_BYTES"] = "-1"  # memory is capped by the sandbox limits
    try:
        with open("payload.json") as f:
            p = json.load(f)
        with open("expected.b64", "rb") as f:
            blob = base64.b64decode(f.read())
        os.remove("payload.json")
        os.remove("expected.b64")
        expected = loads(blob)[p["task_id"]]
        del blob
        base_input, plus_input = loads(base64.b64decode(p["inputs"]))
        import evalplus.eval as ev
        if not os.access("/dev/shm", os.W_OK):
            # No writable /dev/shm (POSIX semaphores, shared-memory arenas) in the sandbox: give
            # evalplus' shared counters lock-free memory in the workdir. Only its single child
            # writes them and the parent reads them after join, so no lock is needed.
            import functools
            import multiprocessing
            import multiprocessing.heap
            multiprocessing.heap.Arena._dir_candidates = []
            ev.Value = functools.partial(multiprocessing.Value, lock=False)
            ev.Array = functools.partial(multiprocessing.Array, lock=False)
        overran = flag_time_limits(ev)
        verdict = {"ok": True}
        for stage, inputs in (("base", base_input), ("plus", plus_input)):
            overran.value = 0
            stat, _ = ev.untrusted_check(
                p["dataset"], p["solution"], inputs, p["entry_point"],
                expected=expected[stage], atol=p["atol"], ref_time=expected[stage + "_time"],
                fast_check=True,
            )
            verdict[stage] = ev.TIMEOUT if stat == ev.FAIL and overran.value else stat
            if stat != ev.PASS:  # plus correctness needs base; evalplus' verdict cannot change
                break
        emit(marker, verdict)
    except BaseException as exc:
        emit(marker, {"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:500]})


if __name__ == "__main__":
    main()
