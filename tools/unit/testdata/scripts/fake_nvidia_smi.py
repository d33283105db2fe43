"""A stand-in for `nvidia-smi --query-gpu=... --format=csv,...`: prints $FAKE_NVIDIA_SMI_CSV.

Exits 9 with NVIDIA's "couldn't communicate with the driver" message when the variable is unset.
"""

import os
import sys

if "FAKE_NVIDIA_SMI_CSV" not in os.environ:
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
assert sys.argv[1:] == ["--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"], sys.argv
print(os.environ["FAKE_NVIDIA_SMI_CSV"], end="")
