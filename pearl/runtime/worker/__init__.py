"""What runs inside a rollout worker actor: the actor (`rollout_worker`), its step loop (`loop`) and
control calls (`control`) over one engine backend, its telemetry (`telemetry_sink`), and
the types it exchanges with the world (`api`: engine spec, turn requests and results)."""
