"""Any ``nn.Module`` packed K times: torch.func's model ensembling, config by config independent.

``stack_module_state`` stacks K instances' parameters along a leading config axis and
``functional_call`` under ``vmap`` evaluates all of them as one batched computation (the
pattern of PyTorch's "Model ensembling" tutorial). What fairdp adds keeps every config
independent of its pack, as the hand-packed layers (``_packed``) do:

- initialisation: config k's instance is built by the factory with torch's default RNG
  seeded from config k's ``init`` stream alone, so its initial weights do not depend on
  which configs share its pack;
- dropout: every ``nn.Dropout`` of the module is replaced by ``PackDropout``, whose masks are
  drawn from each config's own ``dropout`` stream (the draw ``fairdp._rng.dropout`` makes for
  the hand-packed layers) outside vmap's randomness and attached to the config axis vmap is
  mapping over;
- what cannot be packed or clipped per sample is refused by name (``packing_problems``):
  batch statistics (batch norm) mix the rows of a batch, so one row's gradient is not its
  own and per-sample clipping bounds nothing; running statistics are state the functional
  call cannot update.

Per-sample clipping (DP-SGD, PF-LD) is ``vmap(vjp)`` over rows inside the vmap over configs,
a chunk of rows at a time (``FunctionalPack.add_clipped``): ghost clipping (``_ghost``) for the
parameters of the layers it covers (nn.Linear, Conv1d, Conv2d, LayerNorm, GroupNorm,
Embedding), each row's gradients materialised for the others.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch._C import _functorch
from torch.func import functional_call, stack_module_state, vjp, vmap

from fairdp import _rng
from fairdp.engine import _ghost
from fairdp.engine._packed import PackedLinear, PackedMLP
from fairdp.engine._settings import full_precision

# per-sample gradients are computed a chunk of rows at a time, K x rows x parameters floats at
# most: a chunk that stays in cache. On Adult (Tran et al.'s network, K = 8, one thread) 256 MB
# chunks took 2.6 s per config-epoch and 16 MB chunks about 1.2 s (benchmarks/bench_functional.py)
PER_SAMPLE_BYTES = 16 * 2**20


class PackDropout(nn.Module):
    """``nn.Dropout`` inside a ``FunctionalPack``: config k's mask from config k's own stream.

    Called inside the vmap over configs, its input is one config's view; the mask is drawn
    for all K configs at once from the pack's stream (the draw ``_rng.dropout`` makes for a
    hand-packed layer of that shape) and attached to the config axis vmap maps over."""

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)
        self.stream: _rng.PackStream | None = None  # set by FunctionalPack.forward for one call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stream is None or self.p == 0:
            return x
        level = _functorch.maybe_get_level(x)
        if level == -1:
            raise RuntimeError("PackDropout draws its masks inside FunctionalPack's vmap only")
        keep = 1.0 - self.p
        if _rng._numpy_path(self.stream.device) and x.dtype in (torch.float32, torch.float64):
            scale = self.stream.scaled_below(tuple(x.shape), keep, x.dtype)
        else:
            scale = self.stream.below(tuple(x.shape), keep, x.device).to(x.dtype) * (1.0 / keep)
        return x * _functorch._add_batch_dim(scale.to(x.device), 0, level)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def packing_problems(module: nn.Module) -> list[str]:
    """What keeps ``module`` from being packed and clipped per sample, one line per layer
    (its dotted name and why); empty when nothing does."""
    problems = []
    for name, sub in module.named_modules():
        where = name or "(the module itself)"
        if isinstance(sub, (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)):
            problems.append(f"{where} ({type(sub).__name__}): batch statistics mix the rows of a batch, so a "
                            f"row's gradient is not its own and per-sample clipping bounds nothing; use "
                            f"GroupNorm or LayerNorm")
        elif isinstance(sub, nn.modules.instancenorm._InstanceNorm) and sub.track_running_stats:
            problems.append(f"{where} ({type(sub).__name__}): running statistics are updated in place by "
                            f"every batch; use track_running_stats=False")
        elif isinstance(sub, nn.modules.dropout._DropoutNd) and type(sub) is not nn.Dropout:
            problems.append(f"{where} ({type(sub).__name__}): only nn.Dropout's element-wise masks are drawn "
                            f"per config; use nn.Dropout")
        elif isinstance(sub, nn.RNNBase):
            problems.append(f"{where} ({type(sub).__name__}): torch.func cannot vmap its fused kernel; write "
                            f"the recurrence with nn.Linear cells")
    return problems


def row_mixing(module: nn.Module, x: torch.Tensor) -> str | None:
    """Why ``module``, in training mode, does not map each row of the batch ``x`` to an output of
    its own (None when it does on ``x``), in one line: per-sample clipping bounds one record's
    influence only if a row's output, and so its loss and its gradient, are its own.

    A copy of the module is run in training mode, as a pack trains it, with its ``nn.Dropout``
    layers held fixed (masks of ones; a pack draws them per config and per row). It must leave
    its parameters and buffers as they were (state updated in forward carries one batch's rows
    into the next), give the same output twice (randomness outside ``nn.Dropout`` is drawn from
    no config's stream), and give each row the output that row gives alone."""
    copy_ = copy.deepcopy(module)
    for sub in list(copy_.modules()):
        for child_name, child in list(sub.named_children()):
            if type(child) is nn.Dropout:
                setattr(sub, child_name, nn.Identity())
    copy_.train()
    state = dict(copy_.named_parameters(), **dict(copy_.named_buffers()))
    before = {n: t.detach().clone() for n, t in state.items()}

    def changed() -> str | None:
        return next((n for n, t in state.items() if not torch.equal(t.detach(), before[n])), None)

    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        batch = copy_(x)
        if (name := changed()) is not None:
            return (f"its forward updates {name} in place: state carried from one batch to the next mixes "
                    f"the records of different steps, and per-sample clipping would not bound a record's influence")
        torch.manual_seed(1)
        again = copy_(x)
        if not (isinstance(batch, torch.Tensor) and isinstance(again, torch.Tensor)
                and torch.allclose(batch, again, rtol=1e-9, atol=1e-12, equal_nan=True)):
            return ("its forward is not a function of its input in training mode (random numbers drawn outside "
                    "nn.Dropout, which no config's stream holds): use nn.Dropout")
        for z in range(len(x)):
            alone = copy_(x[z:z + 1])
            if not (alone.shape[1:] == batch.shape[1:]
                    and torch.allclose(alone[0], batch[z], rtol=1e-9, atol=1e-12, equal_nan=True)):
                return (f"row {z}'s output depends on the other rows of its batch in training mode (batch "
                        f"statistics, or an operation across rows): per-sample clipping would not bound a row's "
                        f"influence")
    return None


TRIAL_ROWS = 6


def trial_step(build: Callable[[], nn.Module], in_features: int, out_features: int, *,
               dtype: torch.dtype = torch.float32, bf16: bool = False, per_sample: bool = False) -> str | None:
    """Why a pack of the module ``build()`` makes cannot train (None if it can), in one line:
    two configs built and packed as a study packs them (``build_instances``, ``FunctionalPack``),
    a forward of a few rows in training mode with their dropout streams, in ``dtype`` and, with
    ``bf16``, under bf16 autocast, giving (configs, rows, ``out_features``) in the training dtype,
    then a backward; with ``per_sample``, also the clipped per-sample sum DP-SGD and PF-LD
    compute. What fails here would fail inside training, after packs have started."""
    def one_line(e: BaseException) -> str:
        return f"{type(e).__name__}: {' '.join(str(e).split())}"

    try:
        pack = FunctionalPack(build_instances(build, _rng.PackStream.from_names(["trial/0/init", "trial/1/init"]),
                                              device="cpu", dtype=dtype))
    except Exception as e:  # noqa: BLE001 - the user's module's own error is the answer
        return f"cannot be packed: {one_line(e)}"
    empty = next((n for n in pack.names if pack.params[_key(n)][0].numel() == 0), None)
    if empty is not None:
        return f"its parameter {empty} has no entries (a layer of width 0)"
    x = torch.randn(TRIAL_ROWS, in_features, dtype=dtype, generator=torch.Generator().manual_seed(0))
    for precision in ("full", "bf16") if bf16 else ("full",):
        where = " under bf16 autocast" if precision == "bf16" else ""
        allowed = (dtype, torch.bfloat16) if precision == "bf16" else (dtype,)
        try:
            pack.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                out = pack(x, _rng.PackStream.from_names(["trial/0/dropout", "trial/1/dropout"]))
            if tuple(out.shape) != (2, TRIAL_ROWS, out_features):
                return f"a packed step maps {(TRIAL_ROWS, in_features)} to {tuple(out.shape[1:])}{where}, " \
                       f"not {(TRIAL_ROWS, out_features)}"
            if out.dtype not in allowed:
                return (f"returns {str(out.dtype).removeprefix('torch.')} for {str(dtype).removeprefix('torch.')} "
                        f"inputs{where}: its output must keep the training dtype")
            out.float().square().sum().backward()
        except Exception as e:  # noqa: BLE001
            return f"a packed training step fails{where}: {one_line(e)}"
        if all(p.grad is None for p in pack.parameters()):
            return "no parameter receives a gradient from its output"
    if per_sample:
        try:
            unit = torch.randn(2, TRIAL_ROWS, out_features, dtype=dtype, generator=torch.Generator().manual_seed(1))
            weight = torch.ones(2, TRIAL_ROWS, dtype=dtype)
            clip = torch.ones(2, dtype=dtype)
            pack.add_clipped(pack.forward_traced(x)[1], unit, None, weight, clip, None, None)
        except Exception as e:  # noqa: BLE001
            return f"its per-sample gradients cannot be computed: {one_line(e)}"
    return None


def seed_words(init: _rng.PackStream) -> list[int]:
    """One non-negative 63-bit seed per config from its ``init`` stream (one draw)."""
    return [int(w) & (2**63 - 1) for w in init.words(1, device="cpu")[:, 0].tolist()]


def build_instances(factory: Callable[[], nn.Module], init: _rng.PackStream, *, device, dtype) -> list[nn.Module]:
    """K instances of ``factory()``, config k's built with torch's default generators seeded
    from config k's ``init`` stream only: its initial weights do not depend on its pack."""
    out = []
    for seed in seed_words(init):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = factory()
        if not isinstance(module, nn.Module):
            raise TypeError(f"the model factory returned {type(module).__name__}, not a torch.nn.Module")
        out.append(module.to(device=device, dtype=dtype))
    return out


def blank_instances(factory: Callable[[], nn.Module], k: int, *, device, dtype) -> list[nn.Module]:
    """K instances of ``factory()`` whose weights the caller sets (``copy_hand_weights``):
    built without touching torch's global RNG."""
    with torch.random.fork_rng(devices=[]):
        return [factory().to(device=device, dtype=dtype) for _ in range(k)]


@torch.no_grad()
def copy_hand_weights(instances: Sequence[nn.Module], hand: PackedMLP) -> None:
    """Config k's weights of the hand-packed ``hand`` into ``instances[k]``, an ``mlp`` of the
    same sizes: the built-in MLP on the functional path starts where the hand-packed one does."""
    for k, module in enumerate(instances):
        linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
        if len(linears) != len(hand.layers):
            raise ValueError(f"{len(linears)} linear layers to fill from {len(hand.layers)} hand-packed ones")
        for linear, layer in zip(linears, hand.layers):
            linear.weight.copy_(layer.weight[k].T)
            linear.bias.copy_(layer.bias[k, 0])


def packing_of(module: nn.Module) -> str | None:
    """How ``module`` packs its configs: "hand-packed" (fairdp's packed layers), "functional"
    (``FunctionalPack``), "mixed", or None when it holds neither (a plugin's own layers)."""
    kinds = {"functional" if isinstance(m, FunctionalPack) else "hand-packed"
             for m in module.modules() if isinstance(m, (FunctionalPack, PackedLinear))}
    return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else None


def _with_pack_dropout(module: nn.Module) -> tuple[nn.Module, list[PackDropout]]:
    """A copy of ``module`` on the meta device (it only names the computation; the weights are
    the pack's) with every ``nn.Dropout`` replaced by a ``PackDropout`` of the same rate. A
    parameter two modules share (a tied weight) stays one parameter, which ``functional_call``
    then replaces in both: ``.to("meta")`` would give each module a meta copy of its own, and the
    second module would read uninitialised memory instead of the pack's weight."""
    memo = {id(t): nn.Parameter(torch.empty_like(t, device="meta"), requires_grad=t.requires_grad)
            for t in module.parameters()}
    memo.update({id(t): torch.empty_like(t, device="meta") for t in module.buffers()})
    base = copy.deepcopy(module, memo)
    drops = []
    for sub in list(base.modules()):
        for child_name, child in list(sub.named_children()):
            if type(child) is nn.Dropout:
                replacement = PackDropout(child.p)
                setattr(sub, child_name, replacement)
                drops.append(replacement)
    return base, drops


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict and buffer names cannot hold dots


class FunctionalPack(nn.Module):
    """K instances of one module as stacked parameters (leading config axis K) evaluated under
    vmap. ``forward(x)``: x (B, ...) shared by every config or (K, B, ...) one per config ->
    (K, B, ...). The module maps a batch of rows to a batch of outputs; rows must not interact
    (``packing_problems``)."""

    def __init__(self, instances: list[nn.Module], *, shared_input_dims: int = 2):
        super().__init__()
        problems = packing_problems(instances[0])
        if problems:
            raise ValueError("cannot pack this model: " + "; ".join(problems))
        params, buffers = stack_module_state(instances)
        if not params:
            raise ValueError("cannot pack this model: it has no parameters to train")
        base, self._drops = _with_pack_dropout(instances[0])
        # not a submodule: its (meta) parameters only name the computation, the pack's are below
        object.__setattr__(self, "base", base)
        self.names, self.buffer_names = list(params), list(buffers)
        # noise for an nn.Linear's weight is laid out as the hand-packed layers lay theirs out,
        # so the built-in MLP draws the same noise entry for the same weight on either path
        self._linear_weights = {f"{name}.weight".lstrip(".") for name, m in base.named_modules()
                                if isinstance(m, nn.Linear)}
        self.params = nn.ParameterDict({_key(n): nn.Parameter(p.detach()) for n, p in params.items()})
        # ghost clipping's copy of the module: its covered layers record while the recorder records
        ghost_base, _ = _with_pack_dropout(instances[0])
        object.__setattr__(self, "_ghost_base", ghost_base)
        self._recorder = _ghost.Recorder()
        self._ghost_layers = _ghost.install(ghost_base, set(self.names), self._recorder)
        self._ghost_plans: dict[tuple, _ghost.Plan] = {}
        for n, b in buffers.items():
            self.register_buffer("buffer__" + _key(n), b)
        # an input of this many dimensions is one batch shared by every config; one more: a batch per config
        self.shared_input_dims = shared_input_dims

    @property
    def k(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def named_stacks(self) -> list[tuple[str, nn.Parameter]]:
        """(name, every config's parameter stacked (K, *shape)) in ``names`` order, the order
        the noise is drawn in (``parameters()`` follows the ParameterDict, which sorts its keys)."""
        return [(n, self.params[_key(n)]) for n in self.names]

    def _state(self, detach: bool = False) -> tuple[dict, dict]:
        params = {n: self.params[_key(n)] for n in self.names}
        if detach:
            params = {n: p.detach() for n, p in params.items()}
        return params, {n: getattr(self, "buffer__" + _key(n)) for n in self.buffer_names}

    def _shared(self, x: torch.Tensor) -> bool:
        if x.dim() not in (self.shared_input_dims, self.shared_input_dims + 1):
            raise ValueError(f"expected an input of {self.shared_input_dims} dimensions (rows shared by every "
                             f"config) or {self.shared_input_dims + 1} (rows per config), got {tuple(x.shape)}")
        return x.dim() == self.shared_input_dims

    def forward(self, x: torch.Tensor, dropout_generators: _rng.PackStream | None = None) -> torch.Tensor:
        """Every config's output; ``dropout_generators``: the configs' dropout stream while
        training (``nn.Dropout`` layers draw from it), None for evaluation (no dropout)."""
        self._shared(x)  # refuses an input of neither shape
        return self.call("", x, dropout_generators, self.shared_input_dims)

    def stage(self, name: str, shared_input_dims: int = 2) -> PackStage:
        """The submodule ``name`` of the packed module (``"0"``: an ``nn.Sequential``'s first
        part) as a module of its own that shares this pack's parameters; an input of
        ``shared_input_dims`` dimensions is shared by every config."""
        self.base.get_submodule(name)  # raises for a name the module does not have
        return PackStage(self, name, shared_input_dims)

    def call(self, name: str, x: torch.Tensor, dropout_generators: _rng.PackStream | None = None,
             shared_input_dims: int = 2) -> torch.Tensor:
        """``forward`` of the submodule ``name`` only ("": the whole module; its parameters are this pack's)."""
        params, buffers = self._state()
        prefix = name + "." if name else ""
        sub = self.base.get_submodule(name)
        own = {n[len(prefix):]: p for n, p in params.items() if n.startswith(prefix)}
        own_buffers = {n[len(prefix):]: b for n, b in buffers.items() if n.startswith(prefix)}

        def one(p, b, rows):
            return functional_call(sub, (p, b), (rows,))

        for d in self._drops:
            d.stream = dropout_generators
        try:
            shared = x.dim() == shared_input_dims
            return vmap(one, in_dims=(0, 0, None if shared else 0))(own, own_buffers, x)
        finally:
            for d in self._drops:
                d.stream = None

    def last_linear_input(self, name: str, x: torch.Tensor, shared_input_dims: int = 2) -> torch.Tensor:
        """The input of the last layer of the submodule ``name`` ("": the whole module), an
        ``nn.Sequential`` ending in ``nn.Linear`` (a built-in MLP), without dropout: what the
        hand-packed MLP's ``return_hidden`` gives (INLP's penultimate features)."""
        sub = self.base.get_submodule(name)
        if not (isinstance(sub, nn.Sequential) and len(sub) and isinstance(sub[-1], nn.Linear)):
            raise ValueError(f"{name or 'the module'} is not a sequence of layers ending in a linear one")
        prefix = name + "." if name else ""
        for i in range(len(sub) - 1):
            x = self.call(f"{prefix}{i}", x, None, shared_input_dims)
            shared_input_dims = 2  # after the first part every config holds its own rows: (K, B, ...)
        return x if x.dim() > shared_input_dims else x.expand(self.k, *x.shape)

    def layer_groups(self) -> list[list[str]]:
        """The parameters grouped by the module that holds them, in order: the layers that
        per-layer clipping clips one by one."""
        groups: dict[str, list[str]] = {}
        for n in self.names:
            groups.setdefault(n.rpartition(".")[0], []).append(n)
        return list(groups.values())

    def per_sample_grads(self, x: torch.Tensor, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
        """Row z's gradient of <cotangent[k, z], f_k(x_z)> for every config k and row z, without
        dropout: (K, R, *parameter shape) per parameter."""
        params, buffers = self._state(detach=True)

        def row(p, b, xz, vz):
            _, pull = vjp(lambda q: functional_call(self.base, (q, b), (xz.unsqueeze(0),)).squeeze(0), p)
            return pull(vz)[0]

        over_rows = vmap(row, in_dims=(None, None, 0, 0))
        return vmap(over_rows, in_dims=(0, 0, None if self._shared(x) else 0, 0))(params, buffers, x, cotangent)

    def _rows_alone(self, q: dict, b: dict, xs: torch.Tensor) -> torch.Tensor:
        """One config's outputs with each row of ``xs`` evaluated on its own (a batch of one,
        under vmap over the rows): row z's output is a function of row z alone, whatever the
        module does across the rows of a batch."""
        return vmap(lambda xz: functional_call(self.base, (q, b), (xz.unsqueeze(0),)).squeeze(0))(xs)

    def batch_grad(self, x: torch.Tensor, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
        """The gradient of sum_z <cotangent[k, z], f_k(x_z)> per config, each row's output its
        own (``_rows_alone``), without dropout: (K, *parameter shape) per parameter."""
        params, buffers = self._state(detach=True)

        def one(p, b, xs, vs):
            _, pull = vjp(lambda q: self._rows_alone(q, b, xs), p)
            return pull(vs)[0]

        return vmap(one, in_dims=(0, 0, None if self._shared(x) else 0, 0))(params, buffers, x, cotangent)

    # -- ghost clipping (``_ghost``) --------------------------------------------------------

    def ghost_plan(self, x: torch.Tensor) -> _ghost.Plan:
        """Which parameters ghost clipping covers for rows shaped as ``x``'s, and the calls of its
        layers a row makes: found once per input shape from one row of config 0, in the grad mode
        autograd needs. A covered layer's parameter that still receives a gradient when every
        covered layer detaches its parameters is read outside its layer too (weight tying, a
        module reading ``self.fc.weight``): it goes to the materialised path, whose autograd
        through the parameter sees every use."""
        row = x[:1] if self._shared(x) else x[0, :1]
        key = (tuple(row.shape), row.dtype, row.device.type, torch.is_autocast_enabled(row.device.type))
        if key in self._ghost_plans:
            return self._ghost_plans[key]
        params, buffers = self._state(detach=True)
        candidates = [n for layer in self._ghost_layers.values() for n in layer.names.values()]
        with torch.enable_grad():
            leaves = {n: p[0].clone().requires_grad_(n in candidates) for n, p in params.items()}
            self._recorder.start(candidates, None)
            try:
                out = functional_call(self._ghost_base, (leaves, {n: b[0] for n, b in buffers.items()}), (row,))
            finally:
                calls, inputs, outputs = self._recorder.stop()
            outside = set()
            if candidates and isinstance(out, torch.Tensor) and out.requires_grad:
                grads = torch.autograd.grad(out, [leaves[n] for n in candidates], torch.ones_like(out),
                                            allow_unused=True)
                outside = {n for n, g in zip(candidates, grads) if g is not None}
        plan = _ghost.plan_of(self._ghost_layers, self.names, calls, inputs, outputs, outside)
        self._ghost_plans[key] = plan
        return plan

    def _ghost_rows(self, plan: _ghost.Plan, x: torch.Tensor, cotangent: torch.Tensor):
        """One chunk's records: every covered layer call's input and output-gradient and the
        uncovered parameters' per-sample gradients, (K, R, ...) each, row z's from row z alone
        (a batch of one, as ``per_sample_grads`` evaluates it), without dropout."""
        params, buffers = self._state(detach=True)
        covered = {n: params[n] for n in plan.covered}
        uncovered = {n: params[n] for n in plan.uncovered}
        recorder, detach = self._recorder, plan.covered

        def row(pc, pu, b, xz, vz):
            def f(probes, q):
                recorder.start(detach, probes)
                try:
                    out = functional_call(self._ghost_base, ({**pc, **q}, b), (xz.unsqueeze(0),)).squeeze(0)
                finally:
                    calls, inputs, _ = recorder.stop()
                if calls != plan.calls:
                    raise RuntimeError("the module called its layers differently for another row: ghost "
                                       "clipping needs the same layers called in the same order for every row")
                return out, inputs  # the inputs leave vmap as outputs, never kept as batched tensors

            probes = [torch.zeros(shape, dtype=dtype, device=vz.device) for shape, dtype in plan.shapes]
            _, pull, inputs = vjp(f, probes, pu, has_aux=True)
            outgrads, grads = pull(vz)
            return inputs, outgrads, grads

        over_rows = vmap(row, in_dims=(None, None, None, 0, 0))
        return vmap(over_rows, in_dims=(0, 0, 0, None if self._shared(x) else 0, 0))(
            covered, uncovered, buffers, x, cotangent)

    # -- per-sample clipping: the interface HandPackedChain (``_per_sample``) shares ----------

    @torch.no_grad()
    def forward_traced(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs without dropout, the trace ``add_clipped`` needs: here the input). Each row is
        evaluated on its own, as ``per_sample_grads`` evaluates it: a row's loss and the cotangent
        its gradient is pulled back along then depend on that row alone, so one record moves the
        clipped sum by at most the clipping bound for any module, even one that mixes the rows of
        a batch (``row_mixing``; the study refuses those it detects before training)."""
        params, buffers = self._state(detach=True)
        return vmap(self._rows_alone, in_dims=(0, 0, None if self._shared(x) else 0))(params, buffers, x), x

    @torch.no_grad()
    def add_clipped(self, trace: torch.Tensor, unit: torch.Tensor, row_scale: torch.Tensor | None,
                    weight: torch.Tensor, clip: torch.Tensor, noise_std: torch.Tensor | None, generators,
                    plain_scale: torch.Tensor | None = None, per_layer: bool = False,
                    extra_rows: tuple[dict[str, torch.Tensor], torch.Tensor] | None = None,
                    ghost: bool = True) -> np.ndarray:
        """Add -sum_z weight[k, z] clip(g_z, clip[k]) + N(0, noise_std[k]^2) to every ``.grad``
        (no noise, and no draw, when ``noise_std`` is None), where g_z is row z's gradient of
        <unit[k, z] row_scale[k, z], f_k(x_z)> (``row_scale`` None: 1), and with ``plain_scale``
        (K, P) the unclipped gradient of sum over the first P rows of <unit[k, z]
        plain_scale[k, z], f_k(x_z)>. ``per_layer``: each layer's part of g_z is clipped to
        clip / sqrt(layers), so the whole stays within clip. The noise is one draw per config
        for all parameter entries, in ``names`` order. A row whose gradient is not finite adds
        nothing. ``extra_rows`` (gradients, weights): more rows given by their gradients, (K, r,
        *parameter shape) per parameter name and (K, r) weights, clipped, weighted and counted as
        the rows are, before the one noise draw (the training audit's gradient canaries enter
        here). Returns (rows whose gradient norm exceeded clip, rows weighted) per config,
        (2, K), as ``add_clipped_gradients`` does.

        ``ghost`` (the default): the parameters of the layers ghost clipping covers get their
        norms and clipped sum from their layers' inputs and output-gradients (``_ghost``), the
        others from materialised per-sample gradients; False: every parameter materialised
        (``per_sample_grads``), the reference the tests and benchmarks compare with. The two
        give the same sums to rounding."""
        x = trace
        shared = self._shared(x)
        k, rows = weight.shape
        params, _ = self._state()
        item_bytes = max(clip.element_size(), unit.element_size())
        groups = self.layer_groups()
        total = {n: torch.zeros(p.shape, device=p.device, dtype=clip.dtype) for n, p in params.items()}
        shapes = {n: tuple(p.shape[1:]) for n, p in params.items()}
        exceeded = torch.zeros(k, dtype=torch.long, device=weight.device)
        weighted = torch.zeros(k, dtype=torch.long, device=weight.device)

        def accumulate(parts: dict, w: torch.Tensor) -> None:
            # parts: one ``_ghost`` part per parameter (its per-row gradients in some form)
            sq = {n: parts[n].sq() for n in self.names}  # (K, r) per parameter
            norms = sum(sq.values()).sqrt()
            w = w.to(clip.dtype)
            # a row whose gradient is not finite adds nothing (``_per_sample._add_clipped``)
            finite = torch.isfinite(norms)
            if norms.device.type != "cpu" or not finite.all():
                for part in parts.values():
                    part.mask(finite)
                sq = {n: torch.where(finite, t, 0) for n, t in sq.items()}
                w = torch.where(finite, w, 0)
                norms = torch.where(finite, norms, 0)
            if per_layer:
                bound = clip.unsqueeze(1) / math.sqrt(len(groups))
                for names in groups:
                    factor = torch.clamp(bound / sum(sq[n] for n in names).sqrt().clamp_min(1e-12), max=1.0)
                    for n in names:
                        total[n] += parts[n].total(w * factor)
            else:
                factor = torch.clamp(clip.unsqueeze(1) / norms.clamp_min(1e-12), max=1.0)
                for n in self.names:
                    total[n] += parts[n].total(w * factor)
            exceeded.add_(((norms > clip.unsqueeze(1)) & (w != 0)).sum(1))
            weighted.add_((w != 0).sum(1))

        def materialised(g: dict[str, torch.Tensor]) -> dict:
            return {n: _ghost.Rowwise(t.to(clip.dtype)) for n, t in g.items()}

        # clipping, sums and noise in the parameters' precision, never autocast's bf16: the
        # sensitivity and the noise scale the accountant is told are exact only then
        with full_precision(weight.device):
            plan = self.ghost_plan(x) if ghost else None
            if plan is None:
                per_row_bytes = sum(p[0].numel() for p in params.values()) * item_bytes
            else:  # the records and the uncovered parameters' per-sample gradients
                per_row_bytes = (plan.row_floats + sum(params[n][0].numel() for n in plan.uncovered)) * item_bytes
            chunk = max(1, PER_SAMPLE_BYTES // (k * per_row_bytes))
            for lo in range(0, rows, chunk):
                part = slice(lo, min(lo + chunk, rows))
                cot = unit[:, part] if row_scale is None else \
                    unit[:, part] * _trailing(row_scale[:, part], unit.dim()).to(unit.dtype)
                xs = x[part] if shared else x[:, part]
                if plan is None:
                    accumulate(materialised(self.per_sample_grads(xs, cot)), weight[:, part])
                    continue
                inputs, outgrads, grads = self._ghost_rows(plan, xs, cot)
                found = _ghost.parts(self._ghost_layers, plan, inputs, outgrads, shapes, clip.dtype, k,
                                     cot.shape[1], clip.device)
                accumulate({**found, **materialised(grads)}, weight[:, part])
            if extra_rows is not None:
                accumulate(materialised(extra_rows[0]), extra_rows[1])
            step = {n: -t for n, t in total.items()}
            if plain_scale is not None:
                p_rows = plain_scale.shape[1]
                cot = unit[:, :p_rows] * _trailing(plain_scale, unit.dim()).to(unit.dtype)
                plain = self.batch_grad(x[:p_rows] if shared else x[:, :p_rows], cot)
                step = {n: step[n] + plain[n].to(clip.dtype) for n in self.names}
            if noise_std is not None:
                sizes = [params[n][0].numel() for n in self.names]
                noise = _rng.normal((sum(sizes),), generators, device=clip.device, dtype=clip.dtype)
                noise = noise * noise_std.unsqueeze(1)
                for n, piece in zip(self.names, noise.split(sizes, dim=1)):
                    if n in self._linear_weights:  # drawn (in, out), as the hand-packed layers hold it
                        piece = piece.view(k, *step[n].shape[2:0:-1]).transpose(1, 2)
                    step[n] = step[n] + piece.reshape(step[n].shape)
        for n, p in params.items():
            s = step[n].to(p.dtype)
            p.grad = s if p.grad is None else p.grad + s
        return torch.stack([exceeded, weighted]).cpu().numpy()


class PackStage(nn.Module):
    """A part of a ``FunctionalPack``'s module evaluated on its own (an encoder of a packed
    encoder-classifier chain); it holds no parameters: the pack does."""

    def __init__(self, pack: FunctionalPack, name: str, shared_input_dims: int):
        super().__init__()
        object.__setattr__(self, "pack", pack)  # not a submodule: its parameters are registered once, by the owner
        self.name, self.shared_input_dims = name, shared_input_dims

    def forward(self, x: torch.Tensor, dropout_generators: _rng.PackStream | None = None) -> torch.Tensor:
        return self.pack.call(self.name, x, dropout_generators, self.shared_input_dims)

    def last_linear_input(self, x: torch.Tensor) -> torch.Tensor:
        """``FunctionalPack.last_linear_input`` of this part."""
        return self.pack.last_linear_input(self.name, x, self.shared_input_dims)


def mlp(sizes: Sequence[int], dropout: float, activate_last: bool) -> nn.Sequential:
    """One config's ``PackedMLP`` as a plain module: Linear layers with ReLU and dropout
    between them (and after the last with ``activate_last``)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or activate_last:
            layers.append(nn.ReLU())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def _trailing(scale: torch.Tensor, dims: int) -> torch.Tensor:
    """(K, R) per-row scales broadcast over a (K, R, ...) tensor of ``dims`` dimensions."""
    return scale.reshape(*scale.shape, *([1] * (dims - 2)))
