"""Channel adapters: one contract (`base`), one module per system (`rest`, `smtp`, and the helpdesks), a registry.

`base` states the contract every adapter keeps: how an action becomes a
call, how the idempotency key travels with the write, what each outcome
means, and how an effect is found again by its key. `registry.get_channel()`
returns the adapter configured for a channel name. `docs/channels.md`
describes each system.
"""
