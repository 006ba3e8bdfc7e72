//! The controller against the fake transport: bring-up, reset and
//! shutdown as sequences of property writes and queue operations, with no
//! registers or rings involved.

use alloc::boxed::Box;

use super::*;
use crate::spec::command::admin_opcode;
use crate::spec::regs::Cc;
use crate::transport::fake::{ticking_clock, Action, Event, FakeTransport};

fn controller(
    fake: &FakeTransport,
    config: DriverConfig,
) -> Result<Controller<FakeTransport>, DriverError<core::convert::Infallible>> {
    Controller::new(fake.clone(), Box::new(ticking_clock()), config)
}

fn enable_cc() -> u64 {
    u64::from(Cc::for_driver(MPS_SHIFT, true).0)
}

#[test]
fn bring_up_attaches_the_admin_queue_then_enables_through_properties() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    let info = ctrl.info();
    assert_eq!(info.io_queues, 4);
    assert_eq!(info.mdts_bytes, 8192, "MDTS 1 of 4 KiB pages");
    assert_eq!(info.namespace.block_size, 512);
    assert_eq!(info.version, 0x0001_0400);
    let s = fake.state.lock();
    let attach = s.log.iter().position(|e| *e == Event::EnableAdmin);
    let enable = s
        .log
        .iter()
        .position(|e| *e == Event::Set(Property::Cc, enable_cc()));
    assert!(attach.unwrap() < enable.unwrap());
    assert_eq!(s.admin_sent(admin_opcode::IDENTIFY), 3);
    assert_eq!(s.admin_sent(admin_opcode::SET_FEATURES), 1);
}

#[test]
fn a_controller_that_never_gets_ready_times_out_and_is_left_disabled() {
    let fake = FakeTransport::new();
    fake.state.lock().ready_follows_cc = false;
    let r = controller(&fake, DriverConfig::default());
    assert_eq!(r.err(), Some(DriverError::Timeout(Stage::Enable)));
    let s = fake.state.lock();
    assert_eq!(s.log.last(), Some(&Event::Set(Property::Cc, 0)));
}

#[test]
fn missing_capabilities_are_refused_before_enable() {
    let fake = FakeTransport::new();
    fake.state.lock().cap = Cap(0);
    let r = controller(&fake, DriverConfig::default());
    assert_eq!(r.err(), Some(DriverError::Unsupported("NVM command set")));
    assert!(fake.state.lock().log.is_empty(), "nothing was written");
}

#[test]
fn reset_disconnects_live_queues_then_reenables() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    let qid = ctrl.alloc_qid().unwrap();
    fake.state.lock().log.clear();
    ctrl.reset(0).unwrap();
    assert_eq!(ctrl.generation(), 1);
    assert_eq!(ctrl.resets(), 1);
    let s = fake.state.lock();
    let gone = s.log.iter().position(|e| *e == Event::Disconnect(qid));
    let off = s.log.iter().position(|e| *e == Event::Set(Property::Cc, 0));
    let on = s
        .log
        .iter()
        .position(|e| *e == Event::Set(Property::Cc, enable_cc()));
    assert!(gone.unwrap() < off.unwrap() && off.unwrap() < on.unwrap());
    assert_eq!(s.count(Event::Disconnect(qid + 1)), 0, "only allocated ids");
    drop(s);
    assert_eq!(ctrl.reset(0), Ok(()), "a stale generation resets nothing");
    assert_eq!(ctrl.resets(), 1);
}

#[test]
fn resets_in_a_row_declare_the_controller_dead() {
    let fake = FakeTransport::new();
    let config = DriverConfig {
        max_resets: 2,
        ..DriverConfig::default()
    };
    let ctrl = controller(&fake, config).unwrap();
    ctrl.reset(0).unwrap();
    ctrl.reset(1).unwrap();
    assert_eq!(ctrl.reset(2), Err(DriverError::Dead));
    assert!(ctrl.is_dead());
    assert_eq!(
        ctrl.admin(SubmissionEntry::get_features(7)).err(),
        Some(DriverError::Dead)
    );
    ctrl.note_success();
    assert!(ctrl.is_dead(), "death is final");
}

#[test]
fn an_admin_timeout_resets_and_a_late_completion_is_not_a_violation() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    fake.state.lock().admin_plan.push_back(Action::Drop);
    let r = ctrl.admin(SubmissionEntry::get_features(7));
    assert_eq!(r.err(), Some(DriverError::Timeout(Stage::Admin)));
    assert_eq!(ctrl.resets(), 1);
    assert!(ctrl.admin(SubmissionEntry::get_features(7)).is_ok());
    assert_eq!(ctrl.resets(), 1);
}

#[test]
fn a_bogus_admin_completion_resets() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    fake.state.lock().admin_plan.push_back(Action::Bogus);
    let r = ctrl.admin(SubmissionEntry::get_features(7));
    assert!(matches!(r, Err(DriverError::Protocol(_))), "{r:?}");
    assert_eq!(ctrl.resets(), 1);
}

#[test]
fn abort_is_fire_and_forget_and_its_completion_is_reaped() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    assert!(ctrl.send_abort(1, 5));
    assert_eq!(ctrl.reap_admin(), Ok(()));
    assert_eq!(fake.state.lock().admin_sent(admin_opcode::ABORT), 1);
    assert!(ctrl.admin(SubmissionEntry::get_features(7)).is_ok());
}

#[test]
fn dropping_the_controller_shuts_it_down_then_disables_it() {
    let fake = FakeTransport::new();
    let ctrl = controller(&fake, DriverConfig::default()).unwrap();
    assert!(!ctrl.is_fatal());
    fake.state.lock().log.clear();
    drop(ctrl);
    let s = fake.state.lock();
    let shn = u64::from(Cc::for_driver(MPS_SHIFT, true).with_normal_shutdown().0);
    assert_eq!(
        s.log.as_slice(),
        [Event::Set(Property::Cc, shn), Event::Set(Property::Cc, 0)]
    );
}
