"""Published reference points for the variant-comparison pages (scripts/compare_variants).

Every number here is quoted from the source named next to it; none is ours. They are
context for our tables, not targets our presets reproduce: the settings differ (model
size, steps, tokenisation, optimiser), and each entry says how.
"""

NANOGPT = (
    "nanoGPT's character-level Tiny Shakespeare (Karpathy, github.com/karpathy/nanoGPT, "
    "README, section 'quick start'):\n\n"
    "| nanoGPT config | model | context, batch, iterations | best validation loss |\n"
    "|---|---|---|---|\n"
    "| `config/train_shakespeare_char.py` (one A100, about 3 min) | 6 layers, 6 heads, "
    "384 wide, dropout 0.2 | 256, 64, 5000 | 1.4697 |\n"
    "| its CPU command line (`--device=cpu`, about 3 min) | 4 layers, 4 heads, 128 wide, "
    "no dropout | 64, 12, 2000 | about 1.88 |\n\n"
    "nanoGPT reports cross-entropy in nats per character on its own 90/10 split of the "
    "same 1.1 MB text, as this project does (data/builders.py); its model is a GPT "
    "(learned positions, GELU, weight tying), ours pre-LN with sinusoidal positions. Our "
    "`cpu` preset copies nanoGPT's CPU settings (sizes, context 64, batch 12, 2000 "
    "steps, lr 1e-3, no dropout); the `gpu` preset its GPU config.")

LRA_LISTOPS = (
    "Long Range Arena, ListOps test accuracy (Tay et al., 'Long Range Arena: A Benchmark "
    "for Efficient Transformers', ICLR 2021, arXiv:2011.04006, Table 1; sequences up to "
    "2000 tokens, LRA's 6-layer 512-wide model with a CLS token, 5000 steps):\n\n"
    "| LRA model | ListOps accuracy | the variant here that corresponds |\n"
    "|---|---|---|\n"
    "| Transformer | 36.37 | `softmax` (and `flash`, `flash_pallas`, `ring`, `sdpa`: the same "
    "function; `fp8`: it in 8-bit floats) |\n"
    "| Local Attention | 15.82 | `local` |\n"
    "| Sparse Trans. | 17.07 | `sparse` |\n"
    "| Longformer | 35.63 | (`local` is its sliding window without the global tokens) |\n"
    "| Linformer | 35.70 | `linformer` |\n"
    "| Reformer | 37.27 | `reformer` |\n"
    "| Sinkhorn Trans. | 33.67 | - |\n"
    "| Synthesizer | 36.99 | - |\n"
    "| BigBird | 36.05 | - |\n"
    "| Linear Trans. | 16.13 | `linear` |\n"
    "| Performer | 18.01 | `performer` |\n\n"
    "Chance is 10% (10 classes). Our data follow LRA's generator's rules "
    "(lra_benchmarks/data/listops.py in "
    "google-research/long-range-arena) but are our own draw (data/listops.py), and the "
    "`cpu` preset uses shorter sequences and a smaller model, so its numbers are not "
    "comparable with the table's, only its ranking of variants is.")

# LRA Table 1's ListOps accuracy (%) of the model each of our variants implements:
# (LRA's model name, accuracy). flash, flash_pallas, ring, sdpa and fp8 compute the
# softmax attention function (fp8 in a lower precision), hence LRA's Transformer.
_TRANSFORMER = ("Transformer", 36.37)
LRA_LISTOPS_ACC = {
    "softmax": _TRANSFORMER, "flash": _TRANSFORMER, "flash_pallas": _TRANSFORMER,
    "ring": _TRANSFORMER, "sdpa": _TRANSFORMER, "fp8": _TRANSFORMER,
    "local": ("Local Attention", 15.82), "sparse": ("Sparse Trans.", 17.07),
    "linformer": ("Linformer", 35.70), "reformer": ("Reformer", 37.27),
    "linear": ("Linear Trans.", 16.13), "performer": ("Performer", 18.01),
}

COPY = (
    "The copy task is section 4.1 of Katharopoulos et al., 'Transformers are RNNs: Fast "
    "Autoregressive Transformers with Linear Attention' (ICML 2020), which compares "
    "softmax, linear and LSH (Reformer) attention on it by their training-loss curves; "
    "it gives curves, not a table, so no number is quoted here. The issue's target for "
    "this page is ours: softmax and linear each at least 99% token accuracy.")

MULTI30K = (
    "Multi30k en->de, test2016, a text-only Transformer trained from scratch: the "
    "official code of Wu et al., 'Good for Misconceived Reasons: An Empirical Revisiting "
    "on the Need for Visual Context in Multimodal Machine Translation' (ACL 2021, "
    "arXiv:2105.14462), github.com/LividWo/Revisit-MMT, README-baseline.md (commit "
    "29bf6b5), gives 41.02 BLEU for its fairseq `transformer_tiny` text-only baseline "
    "(shared BPE vocabulary, dropout 0.3, 8,000 updates of 4,096 tokens, the average of "
    "the last 10 checkpoints, beam 5, fairseq's BLEU on the tokenised output). The same "
    "paper finds the image features of multimodal systems to act mostly as a "
    "regulariser; Yao & Wan, 'Multimodal Transformer for Multimodal Machine Translation' "
    "(ACL 2020; outputs in github.com/QAQ-v/MMT, README) report 38.7 BLEU for a small "
    "Transformer that also reads image features. Both are references for the order of "
    "magnitude, not the same measurement: ours is a shared 8k sentencepiece vocabulary, "
    "no checkpoint averaging, and sacreBLEU on detokenised output, and BLEU computed "
    "under different tokenisations is not directly comparable (Post, 'A Call for Clarity "
    "in Reporting BLEU Scores', WMT 2018).")

TEXT = {"shakespeare": NANOGPT, "listops": LRA_LISTOPS, "copy": COPY, "multi30k": MULTI30K}
