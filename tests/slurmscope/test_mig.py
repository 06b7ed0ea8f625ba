"""The MIG vocabulary against NVIDIA's MIG user guide and the GRES type names of real Slurm captures."""

from __future__ import annotations

from fractions import Fraction
from importlib.resources import files

import pytest

from slurmscope import mig
from tests.paths import FIXTURES


@pytest.mark.parametrize(
    "product, slices",
    [
        # NVIDIA MIG user guide, "Supported GPUs", column "Max Number of Instances" (read 2026-12-04)
        ("A30", 4),
        ("A100-SXM4", 7),
        ("A100-PCIE", 7),
        ("H100-SXM5", 7),
        ("H100 on GH200", 7),
        ("H20", 7),
        ("H200 NVL", 7),
        ("B200", 7),
        ("GB200", 7),
        ("RTX PRO 6000 Blackwell Server Edition", 4),
        ("RTX PRO 5000 Blackwell", 2),
    ],
)
def test_slices_per_product_are_the_guides_max_instances(product, slices):
    assert mig.product_slices()[product] == slices


@pytest.mark.parametrize(
    "gres_type, model, fraction",
    [
        # "Supported MIG Profiles", A100-SXM4-40GB, column "Fraction of SMs"
        ("a100_1g.5gb", "a100", Fraction(1, 7)),
        ("a100_2g.10gb", "a100", Fraction(2, 7)),
        ("a100_3g.20gb", "a100", Fraction(3, 7)),
        ("a100_4g.20gb", "a100", Fraction(4, 7)),
        ("a100_7g.40gb", "a100", Fraction(7, 7)),
        # A30-24GB: 1g.6gb = 1/4 of the SMs, 2g.12gb+me = 2/4, 4g.24gb = 4/4
        ("a30_1g.6gb", "a30", Fraction(1, 4)),
        ("a30_2g.12gb+me", "a30", Fraction(2, 4)),
        ("a30_4g.24gb", "a30", Fraction(4, 4)),
        # Slurm's AutoDetect=nvml names (gpu_nvml.c: device name up to its first '-', then the profile), as
        # in the real capture slurm-25.11.1-1/sinfo_gpus_total.txt (nvidia_a100_1g.5gb) and the H100 name
        ("nvidia_a100_1g.5gb", "nvidia_a100", Fraction(1, 7)),
        ("nvidia_h100_80gb_hbm3_3g.40gb", "nvidia_h100_80gb_hbm3", Fraction(3, 7)),
        # a compute-instance profile holds its C compute slices of the GPU instance ("MIG Device Names")
        ("a100_1c.3g.20gb", "a100", Fraction(1, 7)),
        # a bare profile: NVIDIA lists 3g.40gb only on 7-slice GPUs (A100 80GB, H100 80GB); no model named
        ("3g.40gb", "3g.40gb", Fraction(3, 7)),
    ],
)
def test_fraction_of_a_gres_type(gres_type, model, fraction):
    s = mig.resolve(gres_type, {})
    assert (s.model, s.gpus) == (model, fraction)


def test_site_names_the_model_of_a_bare_profile():
    # The real slurmrestd capture V0040OpenapiNodesResp.json: nodes with gres gpu:1g.10gb:21 and feature a100.
    s = mig.resolve("1g.10gb", {"1g.10gb": "a100"})
    assert (s.model, s.gpus) == ("a100", Fraction(1, 7))
    # the site's name for the GPU wins over the one the type carries
    assert mig.resolve("nvidia_a100_1g.5gb", {"nvidia_a100_1g.5gb": "a100_40g"}).model == "a100_40g"


def test_a_profile_on_gpus_of_different_sizes_needs_the_model():
    # 1g.24gb: H100 94GB and GH200 (7 slices), RTX PRO 6000 (4) and RTX PRO 5000 (2) all list it.
    assert mig.resolve("1g.24gb", {}) is None
    assert mig.resolve("1g.24gb", {"1g.24gb": "rtx_pro_6000"}).gpus == Fraction(1, 4)
    assert mig.resolve("1g.24gb", {"1g.24gb": "h100_nvl"}).gpus == Fraction(1, 7)
    assert mig.resolve("rtx_pro_5000_1g.24gb", {}).gpus == Fraction(1, 2)
    unresolved: set[str] = set()
    assert mig.holdings("gres/gpu:1g.24gb=1,gres/gpu=1", {}, unresolved) == []
    assert unresolved == {"1g.24gb"}
    assert 'billing.mig_models."1g.24gb"' in mig.unresolved_message(unresolved)


def test_more_slices_than_the_gpu_has_is_not_a_slice_of_it():
    assert mig.resolve("a30_7g.40gb", {}) is None


def test_not_mig_types():
    for t in ("a100", "h100", "nvidia_a100_80gb", "NVlink_A100_40GB", "tesla_v100-sxm3-32gb", "", None):
        assert not mig.is_mig_type(t)
    for t in ("1g.10gb", "nvidia_a100_3g.40gb", "1c.3g.20gb", "1g.10gb+me", "4g.96gb+gfx"):
        assert mig.is_mig_type(t)


def test_units_sum_exactly():
    # lcm of the slice counts 7, 4 and 2: every fraction is a whole number of units
    assert mig.units_per_gpu() == 28
    assert mig.resolve("a100_3g.20gb", {}).units == 12 and mig.resolve("a30_1g.6gb", {}).units == 7


def test_entries_of_real_gres_and_tres_strings():
    fx = FIXTURES / "SckyzO__slurm_exporter"
    total = (fx / "slurm-25.11.1-1" / "sinfo_gpus_total.txt").read_text()
    line = next(x for x in total.splitlines() if "1g.5gb" in x)
    assert mig.entries(line.split()[-1]) == [("nvidia_a100_1g.5gb", 21)]
    idle = (fx / "slurm-25.11.1-1" / "sinfo_gpus_idle.txt").read_text()
    used = next(x for x in idle.splitlines() if "1g.5gb" in x).split()[-1]
    assert used == "gpu:nvidia_a100_1g.5gb:0(IDX:N/A)" and mig.entries(used) == []
    mixed = (fx / "gpus_snapshot_long_gres.txt").read_text().splitlines()[0].split()[-1]
    assert mig.entries(mixed) == [("nvidia_a100_3g.40gb", 7)]  # a `mig` GRES; the whole GPUs are not slices
    assert mig.entries("gpu:1g.10gb:9(IDX:0-3,5-9)") == [("1g.10gb", 9)]
    assert mig.entries("billing=4,cpu=4,gres/gpu:a100_3g.20gb=1,gres/gpu=1,mem=16G,node=1") == [
        ("a100_3g.20gb", 1)
    ]
    # 21 slices of 1/7 on one node: three A100s
    assert mig.holdings("gpu:nvidia_a100_1g.5gb:21(S:0-1)", {}) == [
        ("nvidia_a100", "nvidia_a100_1g.5gb", 21 * 4, 21)
    ]


def test_nvml_names_of_mig_devices():
    # the agent's inventory name of a MIG device: "<GPU name> MIG <profile>" (the H100 capture's nvidia-smi -L)
    assert mig.nvml_slice("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == ("NVIDIA H100 80GB HBM3", Fraction(1, 7))
    assert mig.nvml_slice("NVIDIA A100-SXM4-40GB MIG 3g.20gb") == ("NVIDIA A100-SXM4-40GB", Fraction(3, 7))
    assert mig.nvml_slice("NVIDIA A30 MIG 2g.12gb") == ("NVIDIA A30", Fraction(2, 4))
    # telegraf's A100 XML names no profile: no fraction is made up
    assert mig.nvml_slice("NVIDIA A100-SXM4-80GB MIG") is None
    assert mig.nvml_slice("NVIDIA H100 80GB HBM3") is None


def test_every_profile_name_of_the_table_parses_to_its_slice_count():
    for product, slices in mig.product_slices().items():
        assert slices in (2, 4, 7), product
    text = files("slurmscope").joinpath("nvidia_mig_profiles.csv").read_text()
    for row in text.splitlines()[1:]:
        product, _mem, slices, profile = row.split(",")
        t = mig.parse_type(profile)
        assert t is not None and 1 <= t.compute_slices <= int(slices), row
        assert mig.gpu_slices(product, t.base) == int(slices), row
