"""The simulated world's physics: what a real inference engine on a real GPU does, pinned to
published measurements (docs/simulator-model.md). `iteration`: the time of one engine
iteration from FLOPs and bytes (`linear_sums`: its decode stretches in closed form); `batching`, `worker_state`, `inference`,
`inference_types`: one simulated inference worker (its scheduler, KV, prefix cache);
`prefix_cache`: the KV of trajectories waiting between turns. Nothing here knows the
controller; the world (`pearl.sim.world`) drives it."""
