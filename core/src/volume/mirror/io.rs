//! Synchronous I/O for the moments a mirror is put together or closed:
//! send a batch of commands, poll until every one has finished.

use alloc::vec;
use alloc::vec::Vec;

use super::super::fanout::Fanout;
use crate::dev::{Command, DevError, DeviceQueue};
use crate::units::Nanos;

/// Runs `cmds` (each `(leg, command)`) and returns each one's result.
/// Devices time their commands out themselves (from `clock`), so this
/// ends.
pub(crate) fn run_all<Q: DeviceQueue>(
    fanout: &mut Fanout<Q>,
    cmds: &[(usize, Command<'_>)],
    clock: fn() -> Nanos,
    idle: fn(),
) -> Vec<Result<(), DevError>> {
    let mut results = vec![Err(DevError::Timeout); cmds.len()];
    let mut left = 0;
    for (i, (leg, cmd)) in cmds.iter().enumerate() {
        match fanout.send(*leg, i as u32, cmd) {
            Ok(()) => left += 1,
            Err(e) => results[i] = Err(e),
        }
    }
    while left > 0 {
        let n = fanout.poll(clock(), 64, &mut |op, _leg, r| {
            if let Some(slot) = results.get_mut(op as usize) {
                *slot = r;
            }
        });
        left -= n.min(left);
        if n == 0 {
            idle();
        }
    }
    results
}
