"""NVIDIA MIG vocabulary: how much of its GPU a MIG slice is, and which GPU model it belongs to.

A MIG (Multi-Instance GPU) device is a slice of one GPU with its own compute slices and memory. Capacity,
charges and efficiency count a slice as the fraction of its GPU's compute it holds, never as a whole GPU:

    fraction = compute slices of the profile / compute slices of the GPU

Source: NVIDIA, "NVIDIA Multi-Instance GPU User Guide" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/),
pages "Supported GPUs" (supported-gpus.html: "Max Number of Instances" per product, 7 for A100, H100, H20,
H200, B200 and GB200, 4 for A30 and the RTX PRO 6000 Blackwell editions, 2 for RTX PRO 5000 Blackwell) and
"Supported MIG Profiles" (supported-mig-profiles.html: each profile's "Fraction of SMs", e.g. A100-SXM4-40GB
MIG 1g.5gb = 1/7, 2g.10gb = 2/7, 3g.20gb = 3/7; A30 MIG 1g.6gb = 1/4), read 2026-12-04; "MIG Device Names"
(a profile `<G>g.<M>gb` holds G compute slices of a GPU instance with M GB; a compute-instance profile
`<C>c.<G>g.<M>gb` holds C of them; `+me` and the like add media engines, not compute). The profiles each
product lists are in `nvidia_mig_profiles.csv` beside this module (one row per product and profile).

Slurm names MIG devices in GRES by type (gres.html "MIG Management", Slurm 21.08 and later): AutoDetect=nvml
makes the type `<GPU name up to its first '-'>_<G>g.<M>gb` (src/plugins/gpu/nvml/gpu_nvml.c `_handle_mig`,
e.g. `nvidia_a100_3g.20gb`; sites write a substring of it, `a100_3g.20gb` in Slurm's own example, or the
bare profile `1g.10gb`). So the text before the profile, when there is any, names the GPU model; otherwise
the site says it (config `billing.mig_models`).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from importlib.resources import files

PROFILES_SOURCE = (
    "NVIDIA Multi-Instance GPU User Guide, Supported GPUs and Supported MIG Profiles "
    "(docs.nvidia.com/datacenter/tesla/mig-user-guide/), read 2026-12-04"
)

TYPE_REGEX = r"(?i)(?:^|[_.:-])(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<mem>\d+)gb(?P<ext>\+[a-z]+(?:\.[a-z]+)?)?$"
"""A GRES type ending in a MIG profile (Python and Polars regular expressions alike)."""
_TYPE = re.compile(TYPE_REGEX)
SQL_PREFILTER = r"[0-9]g\.[0-9]+gb"
"""A regular expression a GRES string with a MIG type matches (DuckDB regexp_matches, case-insensitive):
lets a query hand the pipelines only the rows worth parsing."""

FAMILIES = (
    ("rtxpro6000", "RTX PRO 6000 Blackwell Server Edition"),
    ("rtxpro5000", "RTX PRO 5000 Blackwell"),
    ("gb200", "GB200"),
    ("b200", "B200"),
    ("gh200", "H100 on GH200"),
    ("h200", "H200-SXM5"),
    ("h100", "H100-SXM5"),
    ("h20", "H20"),
    ("a100", "A100-SXM4"),
    ("a30", "A30"),
)
"""A model name that contains one of these (letters and digits only, lower case) is that product; the more
specific names come first (gh200 before h200 before h20)."""


@dataclass(frozen=True)
class MigType:
    """A GRES type that names a MIG profile."""

    gres_type: str
    named_model: str | None  # the text before the profile (`nvidia_a100` of `nvidia_a100_3g.40gb`), if any
    profile: str  # `3g.40gb`, `1c.3g.20gb`, `1g.10gb+me` (lower case)
    base: str  # `<G>g.<M>gb`: what NVIDIA's profile table lists
    compute_slices: int


def parse_type(gres_type: str | None) -> MigType | None:
    """The MIG profile a GRES type names (`1g.10gb`, `a100_3g.20gb`, `nvidia_a100_1c.3g.20gb+me`), else None."""
    if not gres_type:
        return None
    m = _TYPE.search(gres_type.strip())
    if m is None:
        return None
    text = gres_type.strip()
    start = m.start() + (1 if m.group(0)[0] in "_.:-" else 0)
    named = text[: m.start()] or None
    g, c = int(m.group("g")), int(m.group("c")) if m.group("c") else None
    if g < 1 or (c is not None and not 1 <= c <= g):
        return None
    return MigType(
        gres_type=gres_type,
        named_model=named,
        profile=text[start:].lower(),
        base=f"{g}g.{int(m.group('mem'))}gb",
        compute_slices=c if c is not None else g,
    )


def is_mig_type(gres_type: str | None) -> bool:
    """True for MIG profile names (`1g.10gb`, `nvidia_a100_3g.40gb`, `1c.3g.20gb`, `1g.10gb+me`)."""
    return parse_type(gres_type) is not None


@cache
def _table() -> tuple[dict[str, int], dict[str, frozenset[int]]]:
    """(slices per product, slices of the products that list each profile)."""
    text = files("slurmscope").joinpath("nvidia_mig_profiles.csv").read_text(encoding="utf-8")
    products: dict[str, int] = {}
    by_profile: dict[str, set[int]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        slices = int(row["gpu_slices"])
        products[row["product"]] = slices
        by_profile.setdefault(row["profile"].split("+")[0], set()).add(slices)
    return products, {k: frozenset(v) for k, v in by_profile.items()}


def product_slices() -> dict[str, int]:
    """NVIDIA product -> its compute slices (the most MIG instances it holds)."""
    return dict(_table()[0])


@cache
def units_per_gpu() -> int:
    """The smallest whole number of units every slice fraction is a whole number of (lcm of 7, 4, 2 = 28):
    slice counts kept in these units sum exactly, as whole-GPU counts do."""
    return math.lcm(*set(_table()[0].values()))


def family(model: str | None) -> str | None:
    """The NVIDIA product a GPU model name or NVML device name stands for (`nvidia_a100` and
    `NVIDIA A100-SXM4-80GB` -> A100-SXM4), or None."""
    if not model:
        return None
    flat = re.sub(r"[^a-z0-9]", "", model.lower())
    return next((product for token, product in FAMILIES if token in flat), None)


def gpu_slices(model: str | None, base: str) -> int | None:
    """Compute slices of the GPU a slice of profile `base` belongs to: its product's, when `model` names
    one; else the one count NVIDIA's profile table gives every product listing `base`; else None (the
    profile exists on GPUs of different sizes, e.g. 1g.24gb on H100 94GB and RTX PRO 6000, or is unknown)."""
    products, by_profile = _table()
    named = family(model)
    if named is not None:
        return products[named]
    counts = by_profile.get(base, frozenset())
    return next(iter(counts)) if len(counts) == 1 else None


def fraction(compute_slices: int, slices: int) -> Fraction:
    return Fraction(compute_slices, slices)


@dataclass(frozen=True)
class Slice:
    """What one MIG device of a GRES type counts as: its GPU model and its share of that GPU in units
    (units_per_gpu() units = one GPU)."""

    model: str
    units: int

    @property
    def gpus(self) -> Fraction:
        return Fraction(self.units, units_per_gpu())


def model_of(t: MigType, models: Mapping[str, str]) -> str:
    """The GPU model a slice is counted under: billing.mig_models by GRES type, then by profile; else the
    model its type names before the profile; else the profile itself."""
    for key in (t.gres_type.lower(), t.profile, t.base):
        if key in models:
            return models[key]
    return t.named_model or t.profile


def resolve(gres_type: str, models: Mapping[str, str]) -> Slice | None:
    """The Slice a GRES type stands for, or None when its GPU's slice count cannot be told (see gpu_slices)."""
    t = parse_type(gres_type)
    if t is None:
        return None
    model = model_of(t, models)
    slices = gpu_slices(model if model != t.profile else None, t.base)
    if slices is None or t.compute_slices > slices:
        return None
    return Slice(model, t.compute_slices * units_per_gpu() // slices)


def entries(tres_or_gres: str | None) -> list[tuple[str, int]]:
    """(MIG type, count) of each MIG entry of a TRES string (`gres/gpu:1g.10gb=2`) or GRES string
    (`gpu:1g.10gb:21(S:1)`, `mig:nvidia_a100_3g.40gb:7`); entries of other types or names are left out."""
    out: list[tuple[str, int]] = []
    if not tres_or_gres:
        return out
    for entry in re.sub(r"\([^)]*\)", "", tres_or_gres).split(","):
        entry = entry.strip()
        for prefix in ("gres/", "gres:"):
            entry = entry.removeprefix(prefix)
        if "=" in entry:
            key, _, value = entry.partition("=")
            name, _, gtype = key.partition(":")
        else:
            parts = [p for p in entry.split(":") if p != "no_consume"]
            if len(parts) < 2:
                continue
            name, gtype, value = (
                parts[0],
                ":".join(parts[1:-1]) or parts[1],
                parts[-1] if len(parts) > 2 else "1",
            )
        if name not in ("gpu", "mig") or not is_mig_type(gtype):
            continue
        try:
            count = float(value)
        except ValueError:
            continue
        if math.isfinite(count) and count > 0:
            out.append((gtype, int(count)))
    return out


def unresolved_message(types: Iterable[str]) -> str:
    """Why some MIG types cannot be counted and which config key fixes it."""
    names = sorted(set(types))
    keys = ", ".join(f'billing.mig_models."{t}"' for t in names)
    return (
        f"MIG GRES type(s) {', '.join(names)}: the GPU they slice is not known, and NVIDIA lists "
        f"{'this profile' if len(names) == 1 else 'these profiles'} on GPUs of different slice counts "
        f'(or not at all): add {keys} = "<GPU model>" (a model such as a100, h100, rtx_pro_6000) to the config file'
    )


def holdings(
    tres_or_gres: str | None, models: Mapping[str, str], unresolved: set[str] | None = None
) -> list[tuple[str, str, int, int]]:
    """(GPU model, MIG type, units, devices) of the MIG slices a TRES or GRES string lists, per type; a type
    whose fraction cannot be told is added to `unresolved` (and left out)."""
    sums: dict[tuple[str, str], list[int]] = {}
    for gtype, count in entries(tres_or_gres):
        s = resolve(gtype, models)
        if s is None:
            if unresolved is not None:
                unresolved.add(gtype)
            continue
        held = sums.setdefault((s.model, gtype), [0, 0])
        held[0] += s.units * count
        held[1] += count
    return [(m, t, u, n) for (m, t), (u, n) in sorted(sums.items())]


def nvml_slice(device_name: str | None) -> tuple[str, Fraction] | None:
    """(GPU product, fraction) of a MIG device from its NVML name (`NVIDIA H100 80GB HBM3 MIG 1g.10gb`,
    as the agent records it in gpu_inventory), or None when the name carries no profile."""
    if not device_name or " MIG " not in f"{device_name} ":
        return None
    parent, _, profile = device_name.partition(" MIG")
    t = parse_type(profile.strip())
    if t is None:
        return None
    slices = gpu_slices(parent, t.base)
    if slices is None or t.compute_slices > slices:
        return None
    return parent.strip(), fraction(t.compute_slices, slices)
