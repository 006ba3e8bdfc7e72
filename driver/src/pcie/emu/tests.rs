//! The emulated controller must not panic on anything the host writes:
//! random commands on the admin queue and on an I/O queue, random
//! register writes, on a namespace without metadata and on one formatted
//! with protection information (random PRINFO and tags).

use crate::pcie::hal::{DmaAllocator, DmaRegion, Registers};
use crate::spec::command::SubmissionEntry;
use crate::spec::regs::{cq_head_doorbell, offset, sq_tail_doorbell, Aqa, Cc};

use super::{EmuConfig, EmuController, EmuMemory, Metadata};
use crate::spec::protection::PiType;

use pollfs_core::rng::SplitMix64;

#[test]
fn random_host_commands_never_panic_the_emulator() {
    random_host_commands(EmuConfig::default());
}

#[test]
fn random_host_commands_never_panic_the_emulator_with_pi() {
    for pi_type in [PiType::Type1, PiType::Type3] {
        random_host_commands(EmuConfig {
            metadata: Metadata::pi(pi_type),
            ..EmuConfig::default()
        });
    }
}

fn random_host_commands(config: EmuConfig) {
    let mut rng = SplitMix64::new(0x1234_5678_9abc_def1);
    let mem = EmuMemory::new();
    let emu = EmuController::new(config, mem.clone());
    let asq = mem.alloc(64 * 64).unwrap();
    let acq = mem.alloc(16 * 64).unwrap();
    let data = mem.alloc(64 * 1024).unwrap();
    emu.write32(offset::AQA, Aqa::new(64, 64).0);
    emu.write64(offset::ASQ, asq.iova().0);
    emu.write64(offset::ACQ, acq.iova().0);
    emu.write32(offset::CC, Cc::for_driver(12, true).0);
    assert_eq!(emu.read32(offset::CSTS) & 1, 1);
    let mut tail = 0u32;
    for round in 0..3000u32 {
        let mut sqe = SubmissionEntry::default();
        for dw in sqe.dw.iter_mut() {
            *dw = rng.next_u64() as u32;
        }
        // Mostly small opcodes and plausible pointers, so commands get past
        // the first checks; sometimes pure garbage.
        if round % 4 != 0 {
            sqe.dw[0] = (sqe.dw[0] & 0xffff_0000) | (rng.next_u64() % 0x12) as u32;
            sqe.dw[1] = (rng.next_u64() % 3) as u32;
            let p = (data.iova().0 + (rng.next_u64() % (64 * 1024))) & !3;
            sqe.set_prps(p, data.iova().0 + (rng.next_u64() % 16) * 4096);
            let qid = (rng.next_u64() % 4) as u32;
            let size = (rng.next_u64() % 70) as u32;
            match sqe.opcode() {
                0x09 | 0x0a => sqe.dw[10] = 7,
                0x00 | 0x01 | 0x04 | 0x05 => {
                    sqe.dw[10] = qid | (size << 16);
                    sqe.dw[11] = 1 | (((rng.next_u64() % 4) as u32) << 16);
                    // Queue memory inside the data region, page aligned.
                    sqe.set_prps(data.iova().0 + (rng.next_u64() % 8) * 4096, 0);
                }
                _ => {}
            }
        }
        asq.write(tail as usize * 64, &sqe.to_bytes()).unwrap();
        tail = (tail + 1) % 64;
        emu.write32(sq_tail_doorbell(0, 0), tail);
        emu.write32(cq_head_doorbell(0, 0), tail);
        // Random doorbells and register writes, including on queues that
        // the random commands may have created.
        let qid = (rng.next_u64() % 4) as u16;
        // A plausible I/O command somewhere in the region the random
        // Create I/O SQ commands point at.
        let mut io = SubmissionEntry::new((rng.next_u64() % 10) as u8, 1);
        io.set_cid(rng.next_u64() as u16);
        io.dw[10] = (rng.next_u64() % 200_000) as u32;
        io.dw[12] = (rng.next_u64() % 64) as u32 | ((rng.next_u64() as u32) & (0x1f << 26));
        // Reference tags near and far from the LBA, random application
        // tags and masks.
        io.dw[14] = io.dw[10].wrapping_add((rng.next_u64() % 3) as u32);
        io.dw[15] = rng.next_u64() as u32;
        io.set_prps(
            (data.iova().0 + (rng.next_u64() % (64 * 1024))) & !3,
            data.iova().0 + (rng.next_u64() % 16) * 4096,
        );
        let at = (rng.next_u64() % (32 * 1024)) as usize & !63;
        data.write(at, &io.to_bytes()).unwrap();
        emu.write32(sq_tail_doorbell(qid, 0), rng.next_u64() as u32 % 70);
        emu.write32(cq_head_doorbell(qid, 0), rng.next_u64() as u32 % 70);
        emu.tick(pollfs_core::units::Nanos(u64::from(round)));
        if round % 500 == 499 {
            // Reset and re-enable now and then.
            emu.write32(offset::CC, 0);
            emu.write32(offset::CC, Cc::for_driver(12, true).0);
            tail = 0;
        }
    }
    let _ = emu.read32(0x10_0000);
    let s = emu.stats();
    assert!(s.admin > 1000);
    assert!(
        s.reads + s.writes + s.flushes + s.dsm + s.write_zeroes > 0,
        "{s:?}"
    );
    if config.metadata != Metadata::default() {
        assert!(s.pi_commands > 0, "{s:?}");
    }
}
