#!/bin/bash
#SBATCH -J small-lm
#SBATCH -c 8
#SBATCH -G 1
#SBATCH -t 90
python train.py --epochs 10 --ckpt_path /home/me/ckpt/last.ckpt --default_root_dir /home/me/ckpt
