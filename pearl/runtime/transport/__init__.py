"""How KV moves from a prefill worker to a decode worker: the `Transport` interface and the
object-store transport (`kv_transfer`), shared memory on one node (`shm`), and the
transports by name (`by_name`)."""
