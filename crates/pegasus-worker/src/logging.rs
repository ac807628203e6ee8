//! The worker's log, `<home>/logs/worker-<name>.log.<date>`: the setup every Pegasus process
//! shares (`pegasus_log`, which also says the `PEGASUS_LOG` syntax).

pub(crate) use pegasus_log::init_worker as init;
