#!/usr/bin/env bash
# Regenerate the reference layer profiles (reproduce/layer_profiles/README.md).
# Measured ones: this machine's CPU, 1 thread (what every rank of the kit's runs and of
# `python -m distsgd bench` uses: launch.py sets torch.set_num_threads(1)).
# Usage: bash reproduce/layer_profiles/make_profiles.sh [measured|projected|all]
# The GPU ones (H200/): python reproduce/gpu_check.py OUT on a CUDA machine, then copy OUT/profiles/<GPU>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python}
what=${1:-all}
out=reproduce/layer_profiles
m() { $py -m distsgd profile --threads 1 "$@"; }
if [[ $what == measured || $what == all ]]; then
  # the schedule benchmark's models at its shapes and batch (bench_schedules INPUT_SHAPES, MODEL_OPTIONS)
  m --model mlp --model-opt 'hidden=[512,512]' --batch-size 16 --out $out/cpu/mlp_b16.csv
  m --model transformer --model-opt dim=128 --model-opt depth=4 --batch-size 16 --out $out/cpu/transformer_b16.csv
  m --model resnet18 --input-shape 3x16x16 --batch-size 16 --out $out/cpu/resnet18_b16_3x16x16.csv
  # the papers' models on CIFAR-size inputs
  m --model resnet18 --batch-size 16 --out $out/cpu/resnet18_b16.csv
  m --model resnet20 --batch-size 32 --out $out/cpu/resnet20_b32.csv
  m --model vgg16 --batch-size 16 --reps 3 --out $out/cpu/vgg16_b16.csv
  m --model resnet50 --batch-size 8 --reps 3 --out $out/cpu/resnet50_b8.csv
  m --model resnet50 --input-shape 3x224x224 --batch-size 2 --reps 3 --warmup 1 --out $out/cpu/resnet50_b2_3x224x224.csv
  m --model bert_base --input-shape 64 --batch-size 4 --reps 3 --warmup 1 --out $out/cpu/bert_base_b4.csv
fi
if [[ $what == projected || $what == all ]]; then
  p() { $py -m distsgd profile "$@"; }
  # DeAR / the survey: synthetic ImageNet, BERT at sequence length 64 (ddl-benchmarks scripts)
  p --model resnet50 --input-shape 3x224x224 --batch-size 64 --project V100-fp32 --out $out/V100-fp32/resnet50_b64.csv
  p --model densenet201 --input-shape 3x224x224 --batch-size 32 --project V100-fp32 --out $out/V100-fp32/densenet201_b32.csv
  p --model vgg16 --input-shape 3x224x224 --batch-size 32 --project V100-fp32 --out $out/V100-fp32/vgg16_b32.csv
  p --model bert_base --input-shape 64 --batch-size 64 --project V100-fp32 --out $out/V100-fp32/bert_base_b64.csv
  p --model bert_large --input-shape 64 --batch-size 8 --project V100-fp32 --out $out/V100-fp32/bert_large_b8.csv
  # the public real-cluster tables (timeline.public_tables): PyTorch's DDP benchmark (batch 32, 224x224),
  # Horovod's first benchmark (tf_cnn_benchmarks, batch 64; Inception v3 at 299x299)
  for m in resnet50 resnet101 resnext50_32x4d resnext101_32x8d; do
    p --model $m --input-shape 3x224x224 --batch-size 32 --project V100-fp32 --out $out/V100-fp32/${m}_b32.csv
  done
  p --model resnet101 --input-shape 3x224x224 --batch-size 64 --project V100-fp32 --out $out/V100-fp32/resnet101_b64.csv
  p --model vgg16 --input-shape 3x224x224 --batch-size 64 --project V100-fp32 --out $out/V100-fp32/vgg16_b64.csv
  p --model inception_v3 --input-shape 3x299x299 --batch-size 64 --project V100-fp32 --out $out/V100-fp32/inception_v3_b64.csv
  # SSD-SGD: ResNet-20 / CIFAR-10, batch 128 per worker (its GPU is not in the text we have: V100)
  p --model resnet20 --batch-size 128 --project V100-fp32 --out $out/V100-fp32/resnet20_b128.csv
  # CoCoD-SGD: ResNet-18 and VGG-16 / CIFAR-10 on 16 GeForce GTX 1080 Ti, batch 128 per GPU
  p --model resnet18 --batch-size 128 --project GTX1080Ti-fp32 --out $out/GTX1080Ti-fp32/resnet18_b128.csv
  p --model vgg16 --batch-size 128 --project GTX1080Ti-fp32 --out $out/GTX1080Ti-fp32/vgg16_b128.csv
fi
