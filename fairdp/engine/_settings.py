"""Training settings (FEDERATE D.4), the device they run on and the matmul precision."""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass, field

import torch

from fairdp import _rng
from fairdp.engine._prune import Pruning
from fairdp.errors import InputError
from fairdp.fairness import MIN_GROUP_COUNT
from fairdp.privacy._shared import ACCOUNTANTS

# float32: IEEE fp32 everywhere. tf32: fp32 tensors, matmuls on CUDA tensor cores in TF32
# (10-bit mantissa); a CPU has no TF32, so there it is float32. bf16: matmuls under
# autocast to bfloat16, with fp32 master weights, optimiser state, losses and every privacy
# step (see ``autocast`` and ``full_precision``).
PRECISIONS = ("float32", "tf32", "bf16")


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel reports (x86 "flags", Arm "Features"); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


# The CPU features that torch's kernels (ATen's dispatch, oneDNN, MKL) choose code paths by: two
# machines that differ in one of them may round differently
_KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16",
                 "avx_vnni", "asimd", "sve", "bf16")


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


@functools.cache
def _builds() -> dict[str, str | None]:
    """torch's version and the BLAS and oneDNN it was built with, from ``torch.__config__``."""
    shown = torch.__config__.show()
    blas = next((part.split("=", 1)[1] for part in shown.replace(",", " ").split() if part.startswith("BLAS_INFO=")),
                None)
    lines = [ln.strip(" -") for ln in shown.splitlines()]
    mkl = next((ln.split(" for ")[0] for ln in lines if "Math Kernel Library" in ln), None)
    onednn = next((ln.split(" (")[0] for ln in lines if "MKL-DNN" in ln or "oneDNN" in ln), None)
    return {"torch": torch.__version__, "blas": mkl or blas, "onednn": onednn}


def device_record(device: torch.device | str) -> dict:
    """What decides the float results a pack computes on ``device``, beyond fairdp's code: the
    CPU model, the instruction-set features torch's kernels dispatch on (ATen's capability and
    the CPU flags that oneDNN and MKL choose paths by), the threads a trial computes with, the
    GPU, and the torch, BLAS and oneDNN builds. Rows store it (``device``); two rows that differ
    in it are not expected to be bit-identical."""
    device = torch.device(device)
    return {"cpu": _cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_flags": sorted(_cpu_flags() & set(_KERNEL_FLAGS)), "threads": torch.get_num_threads(),
            "gpu": _gpu_name(device), "cuda": torch.version.cuda if device.type == "cuda" else None, **_builds()}


def _gpu_name(device: torch.device) -> str | None:
    """The GPU's name; None off CUDA, and where CUDA cannot be reached (a pack that failed for it
    still stores its error rows)."""
    if device.type != "cuda":
        return None
    try:
        return torch.cuda.get_device_name(device)
    except (RuntimeError, AssertionError, ValueError):
        return None


def native_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` multiplies bf16 matrices in hardware: on a CPU, AVX512-BF16 or AMX
    (x86) or the BF16 extension (Arm). Without it, torch emulates bf16 matmuls on a CPU, and
    they run far slower than fp32 (measured on an AVX2 machine: 1 GFLOP/s against 144)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def resolve_device(device: str | None) -> torch.device:
    """``None`` means CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_device_here(device: str | None, path: str = "train.device") -> None:
    """InputError naming ``path`` unless this machine has ``device`` (None: whatever it has):
    packs that train here would otherwise each fail on it and be stored as error rows."""
    if device is None:
        return
    wanted = torch.device(device)
    if wanted.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"{path}: {device} asked for, but this machine has no CUDA GPU that torch can use "
                             f"(torch.cuda.is_available() is False); use cpu, or run where there is one")
        if wanted.index is not None and wanted.index >= count:
            raise InputError(f"{path}: {device} asked for, but this machine has {count} CUDA GPU(s), "
                             f"cuda:0 to cuda:{count - 1}")
    elif wanted.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{path}: mps asked for, but this machine has no Apple GPU that torch can use")


@dataclass(frozen=True)
class TrainSettings:
    """FEDERATE D.4's batch 2000; ``gamma`` is the GRL schedule's steepness.

    ``lr`` None means each method's own paper value (``Method.default_lr``: FEDERATE's Adam
    at 1e-3, CAPE's at 1e-4, ...); a number is used by every method that trains by gradient.
    """

    # Each field's ``protocol`` metadata says whether it changes what a result row means (a
    # study's rows store and compare it on resume, ``fairdp.study.study_protocol``): True (the
    # default, so a new setting is compared unless said otherwise), "column" (stored and
    # compared as a row column of its own), or False (where or how fast it computes, not what).
    epochs: int = field(default=30, metadata={"protocol": "column"})
    batch_size: int = field(default=2000, metadata={"protocol": "column"})
    lr: float | None = field(default=None, metadata={"protocol": "column"})
    gamma: float = 10.0  # Ganin & Lempitsky; FEDERATE's public code uses 7
    device: str | None = field(default=None, metadata={"protocol": False})  # None: CUDA when available, else CPU
    dtype: str = "float32"
    # None: tf32 on CUDA, float32 elsewhere (see PRECISIONS); compared by the rows' precision
    precision: str | None = field(default=None, metadata={"protocol": "column"})
    # dp-accounting's accountant that DP-SGD and PF-LD calibrate their noise with and report the
    # eps of: "rdp" (RdpAccountant) or "pld" (PLDAccountant, tighter: less noise for one eps);
    # compared by the rows' accountant column (fairdp.privacy._accounting.ACCOUNTANTS)
    accountant: str = field(default="rdp", metadata={"protocol": "column"})
    # Configs computed together inside a pack; None picks by device (see engine.config_chunk).
    config_chunk: int | None = field(default=None, metadata={"protocol": False})
    # The part of a GPU this run may fill (a Ray trial's fractional GPU); bounds CUDA chunks.
    gpu_share: float = field(default=1.0, metadata={"protocol": False})
    # Multi-objective pruning inside packs (a study's ``prune:``); None, the default, trains
    # every config for every epoch, as the papers' protocols do.
    prune: Pruning | None = None
    # How DP-SGD and PF-LD clip a row's gradient to C: None, the papers' (its whole norm), or
    # "per_layer" (each layer's part to C / sqrt(layers), Opacus's per-layer clipping with equal
    # bounds; the whole stays within C, so the sensitivity and the guarantee are the same).
    # None by default: a protocol without it is the one stored before it existed.
    clipping: str | None = None
    # "auto": fairdp's hand-packed layers wherever they apply (they are faster); "functional":
    # the built-in MLPs through torch.func too, from the same initial weights (engine
    # ``PACKINGS``). Equal to rounding, so not part of what a row means; rows say which it took.
    packing: str = field(default="auto", metadata={"protocol": False})
    # How DP-SGD and PF-LD draw each step's Poisson sample (``fairdp._rng.POISSON_SAMPLERS``):
    # "gaps" or "coins", the same law, other samples. None: a study follows its stored rows
    # (coins where they predate the choice), else gaps; stored as the rows' sampler column.
    sampler: str | None = field(default=None, metadata={"protocol": "column"})
    # The fewest rows a group's rate is estimated from (a study's ``evaluate.min_group_count``):
    # every fairness gap a pack reports, on valid (its curves, best epoch and pruning) and on
    # test, leaves out a group's rate over fewer rows (``fairdp.fairness``). Compared on resume;
    # stored protocols from before it existed were computed at 1 (``LEGACY_PROTOCOL``).
    min_group_count: int = MIN_GROUP_COUNT

    @property
    def poisson_sampler(self) -> str:
        """The sampler DP-SGD and PF-LD draw with: ``sampler``, gaps when it is left open."""
        return self.sampler or _rng.POISSON_SAMPLERS[0]

    def __post_init__(self):
        for key in ("epochs", "batch_size"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"train.{key}: must be a positive integer, got {v!r}")
        if self.lr is not None and (isinstance(self.lr, bool) or not isinstance(self.lr, (int, float))
                                    or not self.lr > 0):
            raise InputError(f"train.lr: must be > 0, got {self.lr!r}")
        if self.config_chunk is not None and (not isinstance(self.config_chunk, int) or self.config_chunk < 1):
            raise InputError(f"train.config_chunk: must be a positive integer, got {self.config_chunk!r}")
        if not isinstance(self.gpu_share, (int, float)) or not 0 < self.gpu_share <= 1:
            raise InputError(f"train.gpu_share: must be in (0, 1], got {self.gpu_share!r}")
        if self.dtype not in ("float32", "float64"):
            raise InputError(f"train.dtype: must be float32 or float64, got {self.dtype!r}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise InputError(f"train.precision: must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not isinstance(self.accountant, str) or self.accountant not in ACCOUNTANTS:
            raise InputError(f"train.accountant: must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        if self.precision in ("tf32", "bf16") and self.dtype != "float32":
            raise InputError(f"train.precision: {self.precision} needs train.dtype float32, got {self.dtype}")
        if self.clipping not in (None, "per_layer"):
            raise InputError(f"train.clipping: must be per_layer (or left out: each row's whole gradient), "
                             f"got {self.clipping!r}")
        if self.sampler is not None and self.sampler not in _rng.POISSON_SAMPLERS:
            raise InputError(f"train.sampler: must be one of {', '.join(_rng.POISSON_SAMPLERS)} (or left out: "
                             f"the stored rows', else gaps), got {self.sampler!r}")
        if (isinstance(self.min_group_count, bool) or not isinstance(self.min_group_count, int)
                or self.min_group_count < 1):
            raise InputError(f"evaluate.min_group_count: must be an integer >= 1, got {self.min_group_count!r}")
        if self.packing not in ("auto", "functional"):
            raise InputError(f"train.packing: must be auto or functional, got {self.packing!r}")
        if self.prune is not None and self.prune.rungs[-1] >= self.epochs:
            # a rung at the last epoch would stop nothing: training ends there anyway
            raise InputError(f"prune.rungs: every rung must be below train.epochs ({self.epochs}), "
                             f"got {self.prune.rungs[-1]}")


def resolve_precision(settings: TrainSettings, device: torch.device) -> str:
    """The precision a run on ``device`` computes in: the setting, TF32 by default on CUDA,
    and float32 for TF32 on a device without it; float64 runs are float64."""
    if settings.dtype == "float64":
        return "float64"
    precision = settings.precision or ("tf32" if device.type == "cuda" else "float32")
    if precision == "bf16" and device.type == "cpu" and not native_bf16(device):
        warnings.warn("train.precision bf16 on a CPU without native bf16 matmuls (AVX512-BF16, AMX or Arm "
                      "BF16): torch emulates them, far slower than float32", stacklevel=2)
    return "float32" if precision == "tf32" and device.type != "cuda" else precision


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device):
    """CUDA's TF32 switches set for ``precision`` while training, restored afterwards."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def autocast(precision: str, device: torch.device):
    """bfloat16 autocast for ``bf16`` (matmuls in bf16, parameters and gradients stay fp32);
    a no-op otherwise. The privacy steps opt out (``full_precision``)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def full_precision(device: torch.device):
    """Autocast off: for the steps whose arithmetic a privacy proof relies on (normalisation,
    clipping, noise), which must not round to bf16."""
    return torch.autocast(device.type, enabled=False)
