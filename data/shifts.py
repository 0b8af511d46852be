"""Shifted MNIST: the three domain shifts of the seed report's LoRA study.

  x = shifts.apply("rotated", images_N28_uint8, 118.0)   # float32 (N, 28, 28) in [0, 1]

Each shift has one continuous strength parameter, so that it can be calibrated to a
target accuracy of a model trained on plain MNIST (the report gives only those
accuracies, not the transforms; `scripts/lora_mnist.py` calibrates them):

  quantized  1-bit quantisation: pixel > threshold -> 1, else 0. threshold in [0, 1);
             higher thresholds erode the strokes.
  rotated    rotation about the image centre by `degrees` (bilinear, zero fill).
  inverted   colour inversion of strength s in [0.5, 1]: x -> (1 - s) x + s (1 - x).
             s = 1 is the full negative; s = 0.5 is a flat grey image.

Inputs are uint8 (N, 28, 28) images in 0..255 (or float in [0, 1]); outputs are
float32 (N, 28, 28) in [0, 1]. `to_uint8` turns them back into pixel tokens.
"""
from __future__ import annotations

import numpy as np
import scipy.ndimage


def to_unit(x) -> np.ndarray:
  """uint8 images (0..255) -> float32 in [0, 1]; float images pass through as float32."""
  x = np.asarray(x)
  return (x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32))


def quantize(x, threshold: float) -> np.ndarray:
  """1-bit quantisation of (N, H, W) images: (x > threshold) as float32."""
  if not 0.0 <= threshold < 1.0:
    raise ValueError(f"quantize threshold must be in [0, 1), got {threshold}")
  return (to_unit(x) > threshold).astype(np.float32)


def rotate(x, degrees: float) -> np.ndarray:
  """(N, H, W) images rotated counter-clockwise by `degrees` about the centre;
  bilinear interpolation, zero (black) fill outside the source image."""
  x = to_unit(x)
  t = -np.deg2rad(degrees)                    # output pixel o reads input R(t) o
  rot = np.array([[1.0, 0.0, 0.0],
                  [0.0, np.cos(t), -np.sin(t)],
                  [0.0, np.sin(t), np.cos(t)]]).round(12)   # exact at multiples of 90°
  c = (np.array(x.shape, np.float64) - 1) / 2
  c[0] = 0.0                                  # the batch axis does not move
  out = scipy.ndimage.affine_transform(x, rot, offset=c - rot @ c, order=1,
                                       mode="constant", cval=0.0)
  return np.clip(out, 0.0, 1.0).astype(np.float32)


def invert(x, strength: float) -> np.ndarray:
  """Colour inversion of the given strength: (1 - s) x + s (1 - x), s in [0.5, 1]."""
  if not 0.5 <= strength <= 1.0:
    raise ValueError(f"invert strength must be in [0.5, 1], got {strength}")
  x = to_unit(x)
  return ((1 - strength) * x + strength * (1 - x)).astype(np.float32)


SHIFTS = {"quantized": quantize, "rotated": rotate, "inverted": invert}
DEFAULTS = {"quantized": 0.5, "rotated": 90.0, "inverted": 1.0}


def parse(spec: str) -> tuple[str, float]:
  """'inverted' or 'rotated:118.5' -> (name, strength); a bare name takes DEFAULTS.

  Raises ValueError naming the valid shifts, or the bad strength."""
  name, _, val = spec.partition(":")
  if name not in SHIFTS:
    raise ValueError(f"unknown shift {name!r} in {spec!r}; valid: {sorted(SHIFTS)}, "
                     "optionally with ':strength', e.g. 'rotated:90'")
  try:
    param = float(val) if val else DEFAULTS[name]
  except ValueError:
    raise ValueError(f"shift strength {val!r} in {spec!r} is not a number") from None
  SHIFTS[name](np.zeros((1, 2, 2), np.float32), param)     # range check
  return name, param


def apply(name: str, x, param: float) -> np.ndarray:
  """The shift `name` (quantized | rotated | inverted) of strength `param`."""
  if name not in SHIFTS:
    raise ValueError(f"unknown shift {name!r}; valid: {sorted(SHIFTS)}")
  return SHIFTS[name](x, param)


def to_uint8(x_unit) -> np.ndarray:
  """float [0, 1] images -> uint8 0..255 (rounded), e.g. as pixel-model tokens."""
  return np.clip(np.round(np.asarray(x_unit) * 255.0), 0, 255).astype(np.uint8)
