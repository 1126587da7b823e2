"""Small CNNs: the kit's `cnn` for 8x8 (digits) up to 32x32 (CIFAR) images, and LeNet-5.

``cnn``: two blocks of 3x3 convolution (padding 1) + ReLU, each followed by a 2x2 max-pool while
the feature map is at least 4 pixels on a side; then adaptive average pooling to 2x2 and one
Linear. For digits: 8x8 -> 4x4 -> 2x2, about 21 k parameters.

``lenet5`` (VRL-SGD's MNIST model): LeNet-5 of LeCun et al., "Gradient-based learning applied to
document recognition", Proc. IEEE 1998, Sec. II.B: C1 5x5 convolution to 6 maps, S2 2x2 pooling,
C3 5x5 convolution to 16 maps, S4 2x2 pooling, then fully connected layers of 120, 84 and
`num_classes` units. The variant is the one deep-learning code uses (e.g. kuangliu/pytorch-cifar's
LeNet; the VRL-SGD authors import their LeNet5 from a `models` package not in their repository):
ReLU and max-pooling instead of the paper's scaled tanh and trainable sub-sampling, full C1-C3
connections instead of the paper's partial table, and a Linear output instead of RBF units; these
are what trains with plain SGD at lr 0.005 as in VRL-SGD. Inputs smaller than 32x32 are
zero-padded to 32x32 by C1's padding, as the paper centred the 28x28 MNIST digits in a 32x32
field (the VRL-SGD authors resize MNIST to 32x32 instead), so C5 sees 5x5 maps and the model has
61,706 parameters for one input channel and 10 classes, whatever the input side up to 32.
"""
from __future__ import annotations

import math

from torch import nn

from .common import image_shape

POOLED_SIDE = 2
LENET_SIDE = 32            # LeNet-5's input field
LENET_KERNEL = 5


def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The small CNN for inputs of shape `input_shape` = (C, H, W)."""
    channels, height, width = image_shape("cnn", input_shape)
    side = min(height, width)
    layers: list[nn.Module] = []
    for out_channels in (32, 64):
        layers += [nn.Conv2d(channels, out_channels, 3, padding=1), nn.ReLU()]
        if side >= 2 * POOLED_SIDE:
            layers.append(nn.MaxPool2d(2))
            side //= 2
        channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(POOLED_SIDE), nn.Flatten(),
               nn.Linear(channels * POOLED_SIDE**2, num_classes)]
    return nn.Sequential(*layers)


def lenet5(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """LeNet-5 (ReLU, max-pool) for inputs (C, H, W); sides under 32 are zero-padded to 32 by C1."""
    channels, height, width = image_shape("lenet5", input_shape)
    pad_h, pad_w = (max(0, math.ceil((LENET_SIDE - s) / 2)) for s in (height, width))
    side_h, side_w = (((s + 2 * p - LENET_KERNEL + 1) // 2 - LENET_KERNEL + 1) // 2
                      for s, p in ((height, pad_h), (width, pad_w)))
    return nn.Sequential(
        nn.Conv2d(channels, 6, LENET_KERNEL, padding=(pad_h, pad_w)), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, LENET_KERNEL), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * side_h * side_w, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes))
