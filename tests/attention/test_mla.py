"""mla (attention/mla.py) against a float64 NumPy reference written from DeepSeek-V2's
equations (section 2.1): the naive form that materialises every head's keys
K^C = c W_UK and values V^C = c W_UV from the latent c and concatenates the
decoupled RoPE parts, q = [q^C; RoPE(q^R)], k = [k^C; RoPE(k^R)], then one softmax
over q . k / sqrt(d_h + d_r). And its decode state: only the latent and the rope key
per token, its bytes by formula, the absorbed step (no per-head K or V formed)
equal to the forward pass. Tiny shapes, sizes all distinct so that a mixed-up axis
fails. (The contract, tests/attention/test_contract.py -k mla, checks masks, causality,
segments, GQA, refusals and gradients.)
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import mla as M
from tests import reference

B, T, HQ, DH, DC, DR = 2, 7, 4, 6, 20, 4          # d_c, d_r set by options below
OPTS = dict(rope_dim=DR)


def inputs(Hkv, seed=0, dtype=np.float64):
  """q (B, T, Hq, d_h), k = k^R (B, T, Hkv, d_r), v = c (B, T, Hkv, d_c), q_rope
  (B, T, Hq, d_r), w_uk, w_uv (Hq, d_c, d_h)."""
  rng = np.random.default_rng(seed)
  n = lambda *s: rng.standard_normal(s).astype(dtype)
  return dict(q=n(B, T, HQ, DH), k=n(B, T, Hkv, DR), v=n(B, T, Hkv, DC),
              q_rope=n(B, T, HQ, DR), w_uk=n(HQ, DC, DH) / np.sqrt(DC),
              w_uv=n(HQ, DC, DH) / np.sqrt(DC))


def reference_mla(q, k, v, q_rope, w_uk, w_uv, *, causal, mask=None, pos=None,
                  base=10000.0):
  """The paper's MLA in float64, naive: per head i, k^C_{j,i} = W_UK_i c_j, v^C_{j,i} =
  W_UV_i c_j, keys [k^C; RoPE(k^R)] and queries [q^C; RoPE(q^R)], softmax over the
  allowed keys / sqrt(d_h + d_r); a row with no allowed key is zeros. The latent group
  of head i is i // (Hq / Hkv). Returns (B, T, Hq, d_h)."""
  q, k, v, q_rope = (np.asarray(x, np.float64) for x in (q, k, v, q_rope))
  Hq, Hkv = q.shape[2], v.shape[2]
  pos = np.arange(q.shape[1])[None] if pos is None else pos
  c = np.repeat(v, Hq // Hkv, axis=2)                                # (B, T, Hq, d_c)
  kr = np.repeat(reference.rope(k, pos, base), Hq // Hkv, axis=2)   # shared per group
  kc = np.einsum("bjhc,hcd->bjhd", c, np.asarray(w_uk, np.float64))
  vc = np.einsum("bjhc,hcd->bjhd", c, np.asarray(w_uv, np.float64))
  qq = np.concatenate([q, reference.rope(q_rope, pos, base)], -1)
  kk = np.concatenate([kc, kr], -1)
  s = np.einsum("bihd,bjhd->bhij", qq, kk) / np.sqrt(qq.shape[-1])
  allow = reference.allowed(q.shape[0], Hq, q.shape[1], k.shape[1], causal, mask)
  s = np.where(allow, s, -np.inf)
  m = np.max(np.where(allow, s, -1e300), -1, keepdims=True)
  p = np.where(allow, np.exp(s - m), 0.0)
  p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
  return np.einsum("bhij,bjhd->bihd", p, vc)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("Hkv", [1, 2])             # the paper's one latent; two groups
def test_forward_is_the_papers_naive_mla_in_float64(Hkv):
  """Causal, non-causal with a per-query mask (a fully masked row: zeros), explicit
  RoPE positions (a packed row's restart): all to 1e-12 in float64."""
  x = inputs(Hkv)
  mask = np.random.default_rng(3).random((B, 1, T, T)) < 0.7
  mask[:, :, 2] = False
  pos = np.array([[0, 1, 2, 0, 1, 2, 3]])
  f = jax.jit(lambda x, mask, pos: [
      attention.get("mla")(**x, causal=True, **OPTS),
      attention.get("mla")(**x, causal=False, mask=mask, **OPTS),
      attention.get("mla")(**x, causal=True, q_pos=pos, k_pos=pos, **OPTS)])
  causal, masked, positioned = f(x, mask, pos)
  np.testing.assert_allclose(causal, reference_mla(**x, causal=True), atol=1e-12)
  np.testing.assert_allclose(masked, reference_mla(**x, causal=False, mask=mask),
                             atol=1e-12)
  assert np.all(np.asarray(masked)[:, 2] == 0.0)
  np.testing.assert_allclose(positioned, reference_mla(**x, causal=True, pos=pos),
                             atol=1e-12)


def _run_decode(x, prefill):
  """(outputs (B, T, Hq, d_h), final state, the state after the prefill): a prefill of
  `prefill` tokens, then one at a time, float32, one jitted program."""
  Hkv = x["v"].shape[2]

  def run(x):
    st = attention.init_decode_state("mla", batch=B, max_len=T, num_kv_heads=Hkv,
                                     head_dim=DR, v_head_dim=DC, dtype=jnp.float32)
    sl = lambda a, b: {n: x[n][:, a:b] for n in ("q", "k", "v", "q_rope")}
    w = dict(w_uk=x["w_uk"], w_uv=x["w_uv"], **OPTS)
    outs = []
    for a, b in [(0, prefill)] + [(t, t + 1) for t in range(prefill, T)]:
      s = sl(a, b)
      o, st = attention.decode_step(st, s["q"], s["k"], s["v"], q_rope=s["q_rope"], **w)
      outs.append(o)
      if b == prefill:
        first = st
    return jnp.concatenate(outs, 1), st, first

  return jax.jit(run)(x)


@pytest.mark.parametrize("Hkv", [1, 2])
def test_decode_caches_only_the_latent_and_rope_key_and_equals_forward(Hkv):
  """The state holds (B, Hkv, N, d_c) latents and (B, Hkv, N, d_r) rope keys and a
  length, nothing else; its bytes are the formula's (B Hkv N (d_c + d_r) 4 + 4), i.e.
  (d_c + d_r) 4 per token and group, against 2 Hq d_h 4 for MHA's KV cache; a prefill
  then single tokens equal the forward pass in float32 to 1e-5."""
  x = inputs(Hkv, seed=1, dtype=np.float32)
  out, st, first = _run_decode(x, prefill=3)
  ref = attention.get("mla")(**x, causal=True, **OPTS)
  np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)
  np.testing.assert_allclose(out, reference_mla(**x, causal=True), atol=1e-5)
  shapes = {k: v.shape for k, v in
            zip(("latent", "k_rope", "pos"), (st.latent, st.k_rope, st.pos))}
  assert shapes == {"latent": (B, Hkv, T, DC), "k_rope": (B, Hkv, T, DR), "pos": ()}
  assert len(jax.tree.leaves(st)) == 3 and int(st.pos) == T and int(first.pos) == 3
  nbytes = attention.state_nbytes(st)
  assert nbytes == B * Hkv * T * (DC + DR) * 4 + 4
  assert nbytes == attention.decode_state_bytes("mla", batch=B, max_len=T,
                                                num_kv_heads=Hkv, head_dim=DR,
                                                v_head_dim=DC)
  # the cached latent is v itself and the rope key k rotated by its position
  np.testing.assert_array_equal(np.asarray(st.latent).transpose(0, 2, 1, 3), x["v"])
  np.testing.assert_allclose(np.asarray(st.k_rope).transpose(0, 2, 1, 3),
                             reference.rope(x["k"], np.arange(T)[None]), atol=1e-5)


def test_decode_step_never_forms_per_head_keys_or_values():
  """The absorbed step's program has no array of N cached positions by d_h (a per-head
  K^C or V^C): W_UK goes into the query (width d_c), W_UV after p @ c."""
  x = inputs(1, dtype=np.float32)
  st = attention.init_decode_state("mla", batch=B, max_len=T, num_kv_heads=1,
                                   head_dim=DR, v_head_dim=DC)
  one = {n: x[n][:, :1] for n in ("q", "k", "v", "q_rope")}
  jaxpr = jax.make_jaxpr(lambda st, o, w1, w2: attention.decode_step(
      st, o["q"], o["k"], o["v"], q_rope=o["q_rope"], w_uk=w1, w_uv=w2, **OPTS))(
      st, one, x["w_uk"], x["w_uv"])
  shapes = [v.aval.shape for e in jaxpr.jaxpr.eqns for v in e.outvars]
  assert any(s[-2:] == (T, DC) for s in shapes)                  # the latent is read
  bad = [s for s in shapes if T in s and s[-1] == DH]
  assert not bad, f"per-head keys or values formed: {bad}"
  # the training form does form them (materialised K^C: (B, Hkv, G, T, d_h))
  fwd = jax.make_jaxpr(lambda x: attention.get("mla")(**x, causal=True, **OPTS))(x)
  assert any(v.aval.shape == (B, 1, HQ, T, DH) for e in fwd.jaxpr.eqns for v in e.outvars)


def test_record_facts_refusals_and_widths():
  """kv_widths gives (d_r, d_c) = (d_h / 2, 4 d_h) by default (the paper's ratios) and
  follows the options; the layer position schemes, int8/fp8 caches and
  cross-attention are refused by name with the reason; missing inputs are named."""
  v = attention.variant("mla")
  assert v.kv_dims(128) == (64, 512) and v.kv_dims(8, {"latent_dim": 12}) == (4, 12)
  assert v.input_shapes(1, 5, 4, 1, 8) == {"q_rope": (1, 5, 4, 4)}
  assert v.param_shapes(4, 8, 16, {"latent_dim": 12})[0] == {"w_uk": (4, 12, 8),
                                                            "w_uv": (4, 12, 8)}
  assert not v.cross and not v.takes("rope") and v.takes_segments
  x = inputs(1, dtype=np.float32)
  f = attention.get("mla")
  for scheme, why in (("rope", "absorbed"), ("alibi", "decoupled RoPE")):
    with pytest.raises(attention.AttentionError, match=f"'mla'.*'{scheme}'.*{why}"):
      f(**x, positions=scheme, **OPTS)
  with pytest.raises(attention.AttentionError, match="'mla'.*cache_dtype='int8'"):
    attention.init_decode_state("mla", batch=1, max_len=4, num_kv_heads=1, head_dim=DR,
                                v_head_dim=DC, cache_dtype="int8")
  with pytest.raises(attention.AttentionError, match="'mla'.*Tq != Tk"):
    f(**{**x, "q": x["q"][:, :3], "q_rope": x["q_rope"][:, :3]}, **OPTS)
  with pytest.raises(attention.AttentionError, match="missing per-token input q_rope"):
    f(**{**x, "q_rope": None}, **OPTS)
  with pytest.raises(attention.AttentionError, match="rope key\\) head dim 4 != rope_dim 2"):
    f(**x, rope_dim=2)


def test_cost_decode_reads_the_latent_cache():
  """attention.cost(mode="decode"): the cache read is B Tk Hkv (d_c + d_r) itemsize,
  against B Tk Hkv 2 d_h for MHA's KV cache, so at Hkv = 1, d_c = 4 d_h, d_r = d_h / 2
  MLA reads 4.5 d_h per position where MHA with Hq heads reads 2 Hq d_h."""
  kw = dict(batch=1, q_len=1, kv_len=4096, num_heads=8, head_dim=16, mode="decode")
  mla = attention.cost("mla", num_kv_heads=1, **kw)
  mha = attention.cost("softmax", **kw)
  cache = lambda c, other: c.bytes - other
  mla_rest = 4 * (8 * (16 + 8 + 16)) + 4 * 8 * 4096 + 4 * 2 * 8 * 64 * 16
  assert cache(mla, mla_rest) == 4096 * 1 * (64 + 8) * 4
  assert mha.bytes > 3 * mla.bytes
