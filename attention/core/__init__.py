"""The machinery under the variants: everything in attention/ that is not a variant.

  common      the contract's checks and layouts (shapes, masks, GQA grouping, segment
              ids) and the argument guard every variant calls (`unexpected`)
  registry    the one registry: `Variant` records, `register`, `names`, `variant`
  decode      the decode protocol (`DecodeImpl`, `init_decode_state`, `decode_step`)
  kv_cache    the KV cache of every variant that declares its score function
  quantize    the KV cache's int8 and float8 e4m3 formats and their error bounds
  positions   RoPE, 2D RoPE and ALiBi, applied inside attention
  cost_model  FLOPs, transcendentals, bytes and temporaries of a call
  weights     the attention weights a variant applies (heat maps)
  scores      the exact family's library: the softmax core, the score functions'
              contract (`score_attention`) and their probabilities (`probabilities`)
  segments    the state variants' key padding and segment runs (linear, performer and
              the gated family), and their decode steps' refusal of segment ids
  kernelised  the kernelised family's library (linear, performer): parallel, chunked
              and recurrent forms of φ(q)ᵀΣφ(k)vᵀ, with positions and segment resets
  gated       the gated family's library (retention, gla, deltanet): chunked and
              recurrent forms of linear attention with decay, gates or the delta rule

Nothing here imports a variant (`tests/test_imports.py` checks it): the libraries a
family shares live here, and each variant module imports them.

Each variant is one module beside this package (attention/<name>.py) that registers
itself on import; `import attention` imports them all.
"""
