"""The command line (`lakewarden …`, or `python -m cli …`): it starts the services and runs
the chores (`main`), the operator's commands over the REST API (`ops`, `data`; printed by
`output`, sent by `client`), and the demo. It sits above the services, which it starts;
nothing in `lakewarden/` or `services/` imports it."""
