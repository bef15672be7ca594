"""What a run changed against its profile, and a readable name for it.

A DVC experiment is `conf/` composed with a profile and the user's `-S` overrides (DVC's Hydra integration writes the
result to params.yaml). Comparing a run's params with its profile's plain composition gives back the overrides, e.g.
`{"margin": 0.02}`; `experiment_name` turns them into a name DVC accepts (`margin-0.02`), and `readable_name` picks what
to compare with. MLflow's parent run and `make exps` name the experiments DVC named at random so.
"""

from __future__ import annotations

import re
from typing import Any

from lopd.core.config import compose

MAX_NAME_CHARS = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # git forbids spaces, ~^:?*[\ and more in a ref name; keep it plain


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys: `{"sdpo": {"ema_rate": 0.1}}` -> `{"sdpo.ema_rate": 0.1}`."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def param_overrides(params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The flat keys (`sdpo.ema_rate`) whose value in `params` differs from `defaults`, with `params`' value (None
    for a key `params` lacks). `profile` is left out: it names the defaults."""
    ran, default = flatten(params), flatten(defaults)
    return {key: ran.get(key) for key in sorted(ran.keys() | default.keys())
            if key != "profile" and ran.get(key) != default.get(key)}


def profile_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """`param_overrides` against the plain composition of `params`' profile (the `-S` flags of `dvc exp run`)."""
    return param_overrides(params, compose(params.get("profile", "cpu")))


def _text(value: Any) -> str:
    """A value as the user types it after `-S key=`."""
    if isinstance(value, (list, tuple)):
        return "+".join(_text(v) for v in value)
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def experiment_name(overrides: dict[str, Any], profile: str | None = None) -> str:
    """A DVC-valid experiment name from a run's overrides: `margin-0.02`, `smoke_margin-0.02` (with the profile when
    it is not the baseline's), `sdpo.ema_rate-0.1_train.lr-3e-06`, at most MAX_NAME_CHARS long: the overrides that do
    not fit are counted (`..._+2`). Empty when there is nothing to say."""
    parts = ([profile] if profile else []) + [f"{key}-{_text(value)}" for key, value in overrides.items()]
    parts = [_UNSAFE.sub("_", p)[:MAX_NAME_CHARS - 4] for p in parts]  # a long value is cut
    name, shown = "", 0
    for part in parts:
        candidate = f"{name}_{part}" if name else part
        if len(candidate) > MAX_NAME_CHARS - 4 and shown:  # room for "_+NN"
            break
        name, shown = candidate, shown + 1
    if shown < len(parts):
        name += f"_+{len(parts) - shown}"
    name = re.sub(r"\.{2,}", ".", name).strip("._-")  # git: no "..", no leading "-" or "." and no trailing "."
    return name[:-5] if name.endswith(".lock") else name


def readable_name(params: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    """The name of a run of `params` made on a commit whose params.yaml is `baseline` (None: unknown): its overrides
    against that commit's params when both ran one profile (what the user typed after `-S`), else against its
    profile's composition, led by the profile (`smoke_margin-0.02`)."""
    profile = params.get("profile")
    if baseline is not None and baseline.get("profile") == profile:
        return experiment_name(param_overrides(params, baseline))
    return experiment_name(profile_overrides(params), profile)


def is_dvc_generated(name: str) -> bool:
    """Whether `name` is one DVC draws for an unnamed experiment (`mated-cony`: one of its adjectives, one of its
    nouns). DVC keeps its two word lists inside `gen_random_name`, so they are read from its constants."""
    from dvc.repo.experiments.utils import gen_random_name

    adjective, _, noun = name.partition("-")
    lists = [c for c in gen_random_name.__code__.co_consts if isinstance(c, tuple)]
    adjectives = next((set(w) for w in lists if len(w[0]) == 5), set())  # its adjectives have 5 letters
    nouns = next((set(w) for w in lists if len(w[0]) == 4), set())  # its nouns 4
    return adjective in adjectives and noun in nouns
