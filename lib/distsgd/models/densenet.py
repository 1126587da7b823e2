"""torchvision's DenseNet-201 (never pretrained), with the CIFAR stem for small inputs.

DenseNet-201 (Huang et al., "Densely Connected Convolutional Networks", CVPR 2017; growth rate 32,
blocks of 6, 12, 48, 32 layers) is one of the CNNs of DeAR and the survey's benchmark (synthetic
224x224 ImageNet inputs). For inputs of at most `SMALL_INPUT_SIDE` pixels a side the stem is the
CIFAR one, as for ResNet and VGG here (Huang et al., Sec. 3, "for CIFAR and SVHN"): conv0 becomes
a 3x3, stride 1, padding 1 convolution and the 3x3 max-pool is removed, so a 32x32 image reaches the
last dense block at 4x4. conv0 takes `input_shape[0]` channels; a replaced conv0 gets torchvision's
initialization (He normal). 18,112,138 parameters for 10 classes and 3x224x224 inputs, 18,104,458
with the CIFAR stem (its 3x3 conv0 has 7,680 fewer weights).
"""
from __future__ import annotations

from torch import nn
from torchvision import models

from .common import SMALL_INPUT_SIDE, image_shape

STEM_CHANNELS = 64


def densenet201(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """DenseNet-201, CIFAR stem for small inputs."""
    channels, height, width = image_shape("densenet201", input_shape)
    net = models.densenet201(weights=None, num_classes=num_classes)
    small = max(height, width) <= SMALL_INPUT_SIDE
    if small:
        net.features.conv0 = nn.Conv2d(channels, STEM_CHANNELS, 3, 1, 1, bias=False)
        net.features.pool0 = nn.Identity()
    elif channels != net.features.conv0.in_channels:
        net.features.conv0 = nn.Conv2d(channels, STEM_CHANNELS, 7, 2, 3, bias=False)
    if small or channels != 3:
        nn.init.kaiming_normal_(net.features.conv0.weight)      # torchvision's DenseNet init
    return net
