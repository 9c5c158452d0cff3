"""Tensor parallelism: one model's heads and MLP split over N processes.

`sharding` splits a loaded model, `group` starts and drives the ranks from the engine
(rank 0), `worker` is the loop ranks 1..N-1 run, `messages` what passes between them.
Kept free of imports here: the model runner imports `messages` from this package.
"""
