#!/bin/bash

# Parameters
#SBATCH --account=proj
#SBATCH --comment=orchestrator:gpt:seg1
#SBATCH --constraint=h100
#SBATCH --cpus-per-task=16
#SBATCH --exclude='node[3-4]'
#SBATCH --gpus-per-node=8
#SBATCH --job-name=gpt.seg0001
#SBATCH --mail-type=FAIL
#SBATCH --no-requeue
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output='TMP/my run'"'"'s dir/segments/0001/submitit/%j/%j_0_log.out'
#SBATCH --partition=gpu
#SBATCH --qos=high
#SBATCH --signal=USR2@60
#SBATCH --time=240
#SBATCH --wckey=submitit

# setup
ORCH_SETUP_ENV='TMP/my run'"'"'s dir/segments/0001/setup.env'
module load cuda/12.4
export NCCL_DEBUG=WARN

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output 'TMP/my run'"'"'s dir/segments/0001/submitit/%j/%j_%t_log.out' --cpu-bind=none PYTHON -u -m submitit.core._submit 'TMP/my run'"'"'s dir/segments/0001/submitit/%j'
