"""CPU kernels in C, compiled with the machine's C compiler at first use (see build.py)."""
