"""attnlab's models: Flax NNX Transformers composed from the attention registry.

  from models import ModelConfig, build, generate, translate
  cfg = ModelConfig(kind="lm", vocab_size=256, head="dmol", attention="linear", ...)
  model = build(cfg, rngs=nnx.Rngs(0))
  nll_BT = model.nll(y_BT)                       # nats; bits/dim = nll / ln 2
  out = generate(model, prompt_BP, steps=N, key=key)   # jitted lax.scan, cached

See models/README.md for the layout and the choices made.
"""
from models.config import ConfigError, ModelConfig
from models.count import flops_per_token, param_count
from models.generate import Sampler, best_mode, generate, pick, translate
from models.heads import CategoricalHead, MixtureHead, bits
from models.layers import (AttentionWeights, Buffer, MultiHeadAttention, attention_weights,
                           dense_layers, replace_dense)
from models.transformer import Classifier, EncoderDecoder, TransformerLM, build, shift_right

__all__ = ["AttentionWeights", "Buffer", "CategoricalHead", "Classifier", "ConfigError", "EncoderDecoder",
           "MixtureHead", "ModelConfig", "MultiHeadAttention", "Sampler", "TransformerLM",
           "attention_weights", "best_mode", "bits", "build", "dense_layers", "flops_per_token", "generate",
           "param_count", "pick", "replace_dense", "shift_right", "translate"]
