"""`gla`: gated linear attention (Yang et al. 2024), and its scalar-gate case (SSD).

  S_t = diag(α_t) S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ q_t,   α_t = sigmoid(g_t)^(1/τ)

with q scaled by `scale` (1/sqrt(D) by default). g_t = `gate_logits` (B, T, Hkv, D) are
per-token logits computed from the layer input: the models make them by the paper's
low-rank projection x W_1 W_2 + b (rank 16; Variant.inputs["gate_logits"]), and τ = 16
("gate logit normaliser") keeps α near 1 at initialisation, so the state remembers long.
In log space log α_t = log_sigmoid(g_t) / τ, exact for any logit (no 0 or 1 rounding).

gate="ssd": one scalar gate per head and token, gate_logits (B, T, Hkv, 1): S_t = α_t S_{t-1}
+ k_t v_tᵀ, the state-space-dual structure of Mamba-2 (Dao & Gu 2024). Mamba-2 writes its
scalar as exp(-softplus(·) A) with a learned A; here it is the same sigmoid^(1/τ) as the
diagonal gate, so the two options differ in structure only.

Gate ≡ 1 (g → +∞) is linear attention with identity features and no normaliser
(o_i = Σ_{j≤i} (q_i·k_j) v_j), not our `linear` (φ = elu + 1, normalised). Under GQA the
gate is the kv head's (it acts on the state): gate_logits have Hkv heads, and the G query
heads of a group read the same gated state.

The operator only. GLA's layer around it (Yang et al. 2024: each head's output
normalised, then the swish output gate o = norm(attn) ⊙ silu(x W_r) before W_O) is the
model's, from the record's `layer` = ("rms_norm", "out_gate") (the normalisation as
flash-linear-attention's GLA layer builds it; models/layers.py); its short convolutions
on q, k, v are an option there (`gated_layer=published,qkv_conv`). Not built: its key
heads half as wide as its value heads (expand_k = 0.5; our heads share one head_dim). Forms, numerics, masks and decoding: attention.core.gated (form="chunked" by
default with a power-of-two chunk_size for the diagonal gate, also "parallel", "scan" and
"assoc"). q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
"""
from __future__ import annotations

import dataclasses

import jax

from attention.core import common as C
from attention.core import gated as G
from attention.core.registry import InputSpec, Variant, register
from attention.core import positions as P
from attention.core.common import unexpected

NAME = "gla"
GATES = ("diagonal", "ssd")
TAU = 16.0            # Yang et al. 2024's gate logit normaliser
GATE_RANK = 16        # ... and the rank of the gate's projection


def gate_width(head_dim: int, gate: str = "diagonal") -> int:
  """Gate logits per head: head_dim for the diagonal gate, 1 for SSD's scalar."""
  if gate not in GATES:
    raise C.AttentionError(f"{NAME}: gate must be one of {GATES}, got {gate!r}")
  return head_dim if gate == "diagonal" else 1


def log_gate(name, gate_logits, d: C.Dims, gate, tau, dtype):
  """log α = log_sigmoid(g) / τ, (B, T, Hkv, D|1), from checked gate logits."""
  if not tau > 0:
    raise C.AttentionError(f"{name}: tau must be > 0, got {tau!r}")
  g = G.token_input(gate_logits, d, name, "gate_logits", (gate_width(d.D, gate),))
  return jax.nn.log_sigmoid(g.astype(dtype)) / tau


def gla_with_state(q, k, v, *, causal=False, mask=None, scale=None, gate_logits=None,
                   gate="diagonal", tau=TAU, form="chunked", chunk_size=G.DEFAULT_CHUNK,
                   state=None, q_seg=None, k_seg=None):
  """`gla` from `state` (B, Hkv, D, Dv) (None: zeros) -> (out, final state)."""
  d, kmask = G.check_call(NAME, q, k, v, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  la = log_gate(NAME, gate_logits, d, gate, tau, C.compute_dtype(q.dtype))
  return G.diag_gated(NAME, q, k, v, la, d, kmask, scale=scale, form=form,
                      chunk_size=chunk_size, state=state,
                      seg=G.segments(NAME, q_seg, k_seg, d))


def gla(q, k, v, *, causal=False, mask=None, scale=None, gate_logits=None, gate="diagonal",
        tau=TAU, form="chunked", chunk_size=G.DEFAULT_CHUNK,
        positions=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None, **kw):
  """Gated linear attention (Yang et al. 2024) under the contract; causal only.

  q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv) -> (B, T, Hq, Dv), q's dtype.
  gate_logits: (B, T, Hkv, D), or (B, T, Hkv, 1) with gate="ssd"; α = sigmoid^(1/tau).
  mask: key padding only, (B, 1, 1, T). form: "chunked" | "parallel" | "scan" | "assoc".
  q_seg, k_seg (B|1, T): segment ids of a packed row: the state resets at each segment
  start, a gate of exactly 0 (attention.core.gated).
  """
  unexpected(NAME, kw)
  P.prepare(NAME, positions, C.check_qkv(q, k, v, NAME), q_pos, k_pos)  # refuses each
  return gla_with_state(q, k, v, causal=causal, mask=mask, scale=scale,
                        gate_logits=gate_logits, gate=gate, tau=tau, form=form,
                        chunk_size=chunk_size, q_seg=q_seg, k_seg=k_seg)[0]


def implied_weights(q, k, *, causal=True, mask=None, scale=None, gate_logits=None,
                    gate="diagonal", tau=TAU, form="chunked", chunk_size=G.DEFAULT_CHUNK,
                    q_seg=None, k_seg=None):
  """(B, Hq, T, T) weights w_ij = Σ_d q_id k_jd Π_{j<l≤i} α_ld (j ≤ i): out = w @ v."""
  d, kmask = G.check_call(NAME, q, k, k, causal=causal, mask=mask, form=form,
                          chunk_size=chunk_size)
  la = log_gate(NAME, gate_logits, d, gate, tau, C.compute_dtype(q.dtype))
  return G.diag_implied_weights(q, k, la, d, kmask, scale, G.segments(NAME, q_seg, k_seg, d))


def _cost(d, *, causal=True, mode="fwd", itemsize=4, gate="diagonal", form="chunked",
          chunk_size=G.DEFAULT_CHUNK, **kw):
  F = gate_width(d.D, gate)
  c = G.diag_cost(d, mode=mode, itemsize=itemsize, F=F, form=form, chunk=chunk_size)
  gates = d.B * d.Tq * d.Hkv * F * (2 if mode == "fwd_bwd" else 1)   # log_sigmoid's
  return dataclasses.replace(c, transcendentals=c.transcendentals + 2 * gates)


register(Variant(
    name=NAME, fn=gla, paper="Yang et al. 2024", time="O(N C D + N D Dv)",
    memory="O(N (D + Dv))", causal=True, masks="key padding",
    decode="S per kv head, O(D Dv) per token",
    decode_impl=G.decode_impl(gla_with_state), cost=_cost, cross=False, causal_only=True,
    family="gated", forms=G.FORMS, implied_weights=implied_weights,
    positions=G.POSITIONS_REFUSED, segments=G.SEGMENTS, layer=("rms_norm", "out_gate"),
    inputs={"gate_logits": InputSpec(width=gate_width, rank=GATE_RANK, options=("gate",))},
    summary="gated linear attention: S ← diag(α_t) S + k vᵀ, α_t = σ(x W₁W₂)^(1/16); "
            "gate='ssd': one scalar per head (Mamba-2); chunked, parallel, scan, "
            "associative scan"))
