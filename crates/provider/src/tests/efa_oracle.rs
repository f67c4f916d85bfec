//! The EFA oracle, rverbs' side: runs the scripts of `tests/efa_oracle/` through `EfaDriver`
//! (the provider seam; a fake kernel answering exactly as the C harness's does, ordinary
//! memory behind every mmap key) and prints the same dump the harness prints for libefa 44
//! (`tests/harnesses/efa_oracle/harness.c`). The test compares it with the committed golden
//! dump of libefa (`*.golden`, made by `cargo xtask efa-oracle`): identical, or the first
//! differing line with its step.
//!
//! With `EFA_ORACLE_SCRIPT=FILE` it runs only that script and writes rverbs' dump to
//! `EFA_ORACLE_OUT` (used by `cargo xtask efa-oracle --script FILE`).
//!
//! Nothing is masked: EFA's driver data carries no addresses. Steps rverbs does not take at
//! the provider level: `rts` (QP state lives in the core) prints nothing on either side.

use super::mlx5_fake::{fd, kobj};
use super::mlx5_oracle::compare;

use std::fmt::Write as _;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::efa::abi::*;
use crate::efa::driver::{alloc_ucontext_cmd, EfaDriver, EfaInfo, EfaMap, EfaMem, QP_TYPE_DRIVER};
use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::driver::{CqCreated, CqOps, Driver, QpCreated, QpOps, QpRequest};
use rverbs_uverbs::kernel::mapping::MapAccess;
use rverbs_uverbs::qp::{QpCaps, QpType};
use rverbs_uverbs::{OpKind, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, WorkCompletion};
use zerocopy::{FromBytes, IntoBytes};

pub(super) const PAGE: usize = 4096;
const KEY_BASE: u64 = 0x100;

/// The fake kernel's memory objects: key k is `(KEY_BASE + k) * PAGE` (harness.c `new_mem`).
#[derive(Debug, Default)]
pub(super) struct FakeMem {
    objs: Mutex<Vec<Vec<u64>>>,
}

impl FakeMem {
    pub(super) fn new_mem(&self, len: usize) -> u64 {
        let l = len.div_ceil(PAGE).max(1) * PAGE;
        let mut o = self.objs.lock().unwrap();
        o.push(vec![0u64; l / 8]);
        (KEY_BASE + o.len() as u64 - 1) * PAGE as u64
    }

    pub(super) fn ptr(&self, key: u64) -> *mut u8 {
        let mut o = self.objs.lock().unwrap();
        o[(key / PAGE as u64 - KEY_BASE) as usize]
            .as_mut_ptr()
            .cast()
    }
}

impl EfaMem for FakeMem {
    fn map(
        &self,
        _fd: BorrowedFd<'_>,
        key: u64,
        len: usize,
        _access: MapAccess,
        _what: &str,
    ) -> io::Result<EfaMap> {
        let mut o = self.objs.lock().unwrap();
        let k = (key / PAGE as u64).wrapping_sub(KEY_BASE) as usize;
        match o.get_mut(k) {
            Some(v) if key % PAGE as u64 == 0 && len <= v.len() * 8 => {
                let p = NonNull::new(v.as_mut_ptr().cast::<u8>()).unwrap();
                // SAFETY: the object's heap buffer is never reallocated or freed while the
                // run lives (the run drops every queue before the fake).
                Ok(unsafe { EfaMap::borrowed(p, len) })
            }
            _ => Err(io::Error::from_raw_os_error(22)),
        }
    }
}

struct Region {
    name: String,
    addr: *const u8,
    len: usize,
    shadow: Vec<u8>,
}

#[derive(Default)]
struct Kc {
    sub_cqs: u16,
    inline_buf: u16,
    max_llq: u32,
    max_tx_batch: u16,
    min_sq_wr: u16,
    max_sq_wr: u32,
    max_rq_wr: u32,
    max_sq_sge: u16,
    max_rq_sge: u16,
    max_rdma: u32,
    caps: u32,
    udata_mask: u32,
}

/// A CQ: its ops, ring, entries per sub-CQ, CQEs written per sub-CQ.
type TestCq = (Box<dyn CqOps>, *mut u8, u32, Vec<u32>);

#[derive(Default)]
struct Run {
    out: String,
    mem: Arc<FakeMem>,
    driver: Option<EfaDriver>,
    regions: Vec<Region>,
    cqs: Vec<Option<TestCq>>,
    qps: Vec<Option<Box<dyn QpOps>>>,
    ahs: Vec<Option<u32>>,
    inline: Vec<Vec<u8>>,
    next_handle: u32,
}

fn arg<'a>(t: &[&'a str], key: &str) -> Option<&'a str> {
    t.iter()
        .find_map(|s| s.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn parse_num(v: &str) -> u64 {
    if let Some(h) = v.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap()
    } else {
        v.parse().unwrap()
    }
}

fn num(t: &[&str], key: &str, dflt: u64) -> u64 {
    arg(t, key).map_or(dflt, parse_num)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn set<T>(v: &mut Vec<Option<T>>, i: usize, x: T) {
    while v.len() <= i {
        v.push(None);
    }
    v[i] = Some(x);
}

impl Run {
    fn region(&mut self, name: String, addr: *const u8, len: usize) {
        self.regions.push(Region {
            name,
            addr,
            len,
            shadow: vec![0; len],
        });
    }

    fn dump(&mut self) {
        for r in &mut self.regions {
            // SAFETY: every region is fake kernel memory this run owns; nobody writes it
            // concurrently.
            let now = unsafe { std::slice::from_raw_parts(r.addr, r.len) };
            for o in (0..r.len).step_by(64) {
                let n = (r.len - o).min(64);
                if now[o..o + n] != r.shadow[o..o + n] {
                    let _ = writeln!(self.out, "  {} +{o:04x} {}", r.name, hex(&now[o..o + n]));
                    r.shadow[o..o + n].copy_from_slice(&now[o..o + n]);
                }
            }
        }
    }

    fn sges(&mut self, t: &[&str]) -> Vec<Sge> {
        let mut v = Vec::new();
        for s in t {
            if let Some(x) = s.strip_prefix("sge=") {
                let p: Vec<u64> = x.split(':').map(parse_num).collect();
                v.push(Sge {
                    addr: p[0],
                    length: p[1] as u32,
                    lkey: p[2] as u32,
                });
            } else if let Some(x) = s.strip_prefix("data=") {
                let mut b = unhex(x);
                v.push(Sge {
                    addr: b.as_mut_ptr() as u64,
                    length: b.len() as u32,
                    lkey: 0,
                });
                self.inline.push(b);
            }
        }
        v
    }

    fn ctx(&mut self, t: &[&str]) {
        let kc = Kc {
            sub_cqs: num(t, "sub_cqs", 2) as u16,
            inline_buf: num(t, "inline_buf", 32) as u16,
            max_llq: num(t, "max_llq", 1 << 16) as u32,
            max_tx_batch: num(t, "max_tx_batch", 0) as u16,
            min_sq_wr: num(t, "min_sq_wr", 0) as u16,
            max_sq_wr: num(t, "max_sq_wr", 1024) as u32,
            max_rq_wr: num(t, "max_rq_wr", 1024) as u32,
            max_sq_sge: num(t, "max_sq_sge", 2) as u16,
            max_rq_sge: num(t, "max_rq_sge", 2) as u16,
            max_rdma: num(t, "max_rdma", 1 << 30) as u32,
            caps: num(
                t,
                "caps",
                u64::from(EFA_QUERY_DEVICE_CAPS_RDMA_READ | EFA_QUERY_DEVICE_CAPS_RNR_RETRY),
            ) as u32,
            udata_mask: num(
                t,
                "udata_mask",
                u64::from(
                    EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE | EFA_USER_CMDS_SUPP_UDATA_CREATE_AH,
                ),
            ) as u32,
        };
        // The fake kernel's answers (harness.c, GET_CONTEXT and QUERY_DEVICE).
        let resp = efa_ibv_alloc_ucontext_resp {
            cmds_supp_udata_mask: kc.udata_mask,
            sub_cqs_per_cq: kc.sub_cqs,
            inline_buf_size: kc.inline_buf,
            max_llq_size: kc.max_llq,
            max_tx_batch: kc.max_tx_batch,
            min_sq_wr: kc.min_sq_wr,
            ..Default::default()
        };
        let q = efa_ibv_ex_query_device_resp {
            max_sq_wr: kc.max_sq_wr,
            max_rq_wr: kc.max_rq_wr,
            max_sq_sge: kc.max_sq_sge,
            max_rq_sge: kc.max_rq_sge,
            max_rdma_size: kc.max_rdma,
            device_caps: kc.caps,
            ..Default::default()
        };
        let query = (kc.udata_mask & EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE != 0).then_some(&q);
        let info = match EfaInfo::new("efa_0", &resp, query) {
            Ok(i) => i,
            Err(_) => {
                self.out.push_str("  = err\n");
                return;
            }
        };
        self.next_handle = 2; // the harness's PD took handle 1
        let _ = writeln!(self.out, "  udata {}", hex(alloc_ucontext_cmd().as_bytes()));
        // What libefa's efadv_query_device reports: rverbs' `efa_device_attr` (the C
        // drop-in's efadv_query_device).
        let a = info.device_attr();
        let _ = writeln!(
            self.out,
            "  device max_sq_wr {} max_rq_wr {} max_sq_sge {} max_rq_sge {} inline_buf {} max_rdma {} caps {:#x}",
            a.max_sq_wr, a.max_rq_wr, a.max_sq_sge, a.max_rq_sge,
            a.inline_buf_size, a.max_rdma_size, a.device_caps
        );
        self.driver = Some(EfaDriver::new(info, self.mem.clone(), PAGE));
    }

    fn step(&mut self, t: &[&str]) {
        match t[0] {
            "ctx" => self.ctx(t),
            "cq" => {
                let id: usize = t[1].parse().unwrap();
                let cqn = num(t, "cqn", id as u64) as u16;
                let with_db = num(t, "db", 1) != 0;
                let db_off = num(t, "db_off", 0x40 * id as u64) as u32;
                let drv = self.driver.as_ref().unwrap();
                let k = drv.adjust_cqe(num(t, "cqe", 15) as u32).unwrap();
                let mem = self.mem.clone();
                let mut udata = Vec::new();
                let mut resp = efa_ibv_create_cq_resp::default();
                let handle = self.next_handle;
                // SAFETY: the create contract as the fake kernel keeps it: every key it
                // answers names memory of `mem`, of the size it says.
                let r = unsafe {
                    drv.create_cq(fd(), k, &mut |uin, uout| {
                        udata = uin.to_vec();
                        let c = efa_ibv_create_cq::read_from_bytes(uin).unwrap();
                        resp.cq_idx = cqn;
                        resp.q_mmap_size =
                            (usize::from(c.num_sub_cqs) * k as usize * c.cq_entry_size as usize)
                                .div_ceil(PAGE) as u64
                                * PAGE as u64;
                        resp.q_mmap_key = mem.new_mem(resp.q_mmap_size as usize);
                        if with_db {
                            resp.comp_mask = EFA_CREATE_CQ_RESP_DB_OFF;
                            resp.db_off = db_off;
                            resp.db_mmap_key = mem.new_mem(PAGE);
                        }
                        uout.copy_from_slice(resp.as_bytes());
                        Ok(CqCreated { handle, cqe: k })
                    })
                };
                self.next_handle += 1;
                let ops = match r {
                    Ok(o) => o,
                    Err(_) => {
                        self.out.push_str("  = err\n");
                        return;
                    }
                };
                let _ = writeln!(self.out, "  cqe {k}");
                let _ = writeln!(self.out, "  udata {}", hex(&udata));
                let c = efa_ibv_create_cq::read_from_bytes(&udata[..]).unwrap();
                let buf = self.mem.ptr(resp.q_mmap_key);
                let len = k as usize * usize::from(c.num_sub_cqs) * c.cq_entry_size as usize;
                self.region(format!("cq{id}.buf"), buf, len);
                if with_db {
                    // SAFETY: inside the doorbell page.
                    let p = unsafe { self.mem.ptr(resp.db_mmap_key).add(db_off as usize) };
                    self.region(format!("cq{id}.db"), p, 4);
                }
                set(
                    &mut self.cqs,
                    id,
                    (ops, buf, k, vec![0; usize::from(c.num_sub_cqs)]),
                );
            }
            "qp" => self.qp(t),
            "ah" => {
                let id: usize = t[1].parse().unwrap();
                let ahn = num(t, "ahn", id as u64) as u16;
                let attr = AhAttr {
                    port_num: 1,
                    ..Default::default()
                };
                // SAFETY: the create contract as the fake kernel keeps it.
                let r = unsafe {
                    self.driver
                        .as_ref()
                        .unwrap()
                        .create_ah(&attr, &mut |_, uout| {
                            let a = efa_ibv_create_ah_resp {
                                efa_address_handle: ahn,
                                ..Default::default()
                            };
                            uout.copy_from_slice(a.as_bytes());
                            Ok(1)
                        })
                };
                self.next_handle += 1;
                match r {
                    Ok(n) => {
                        let _ = writeln!(self.out, "  ahn {n}");
                        set(&mut self.ahs, id, n);
                    }
                    Err(_) => self.out.push_str("  = err\n"),
                }
            }
            "rts" => {}
            "reset" => {
                let id = num(t, "qp", 0) as usize;
                self.qps[id].as_mut().unwrap().reset();
            }
            "destroy_qp" => {
                let id = num(t, "qp", 0) as usize;
                self.qps[id] = None;
            }
            "close" => {
                self.qps.clear();
                self.ahs.clear();
                self.cqs.clear();
                self.driver = None;
                self.regions.clear();
            }
            "wr" => {
                // libefa's `ibv_wr_*` session: all or nothing. rverbs' post takes the
                // requests before a refused one, so the scripts refuse only a session's first.
                let id = num(t, "qp", 0) as usize;
                let groups: Vec<Vec<&str>> =
                    t[1..].split(|s| *s == "|").map(|g| g.to_vec()).collect();
                let sges: Vec<Vec<Sge>> = groups.iter().map(|g| self.sges(g)).collect();
                let wrs: Vec<SendWr<'_>> = groups
                    .iter()
                    .zip(&sges)
                    .map(|(g, s)| self.send_wr(g, s))
                    .collect();
                let qp = self.qps[id].as_mut().unwrap();
                // SAFETY: as for `send`.
                match unsafe { qp.post_send(kobj(), &wrs) } {
                    Ok(()) => {}
                    Err(e) if e.posted() == 0 => self.out.push_str("  = err\n"),
                    Err(e) => {
                        let _ = writeln!(self.out, "  = err after {} posted", e.posted());
                    }
                }
            }
            "send" | "bench" => {
                let id = num(t, "qp", 0) as usize;
                let groups: Vec<Vec<&str>> =
                    t[1..].split(|s| *s == "|").map(|g| g.to_vec()).collect();
                let sges: Vec<Vec<Sge>> = groups.iter().map(|g| self.sges(g)).collect();
                let wrs: Vec<SendWr<'_>> = groups
                    .iter()
                    .zip(&sges)
                    .map(|(g, s)| self.send_wr(g, s))
                    .collect();
                if t[0] == "bench" {
                    self.bench(t, id, Wrs::Send(&wrs));
                    return;
                }
                let qp = self.qps[id].as_mut().unwrap();
                // SAFETY: non-inline SGEs are never dereferenced (no device); inline ones name
                // buffers this run keeps.
                if let Err(e) = unsafe { qp.post_send(kobj(), &wrs) } {
                    let _ = writeln!(self.out, "  = err at {}", e.posted());
                }
            }
            "recv" | "rbench" => {
                let id = num(t, "qp", 0) as usize;
                let groups: Vec<Vec<&str>> =
                    t[1..].split(|s| *s == "|").map(|g| g.to_vec()).collect();
                let sges: Vec<Vec<Sge>> = groups.iter().map(|g| self.sges(g)).collect();
                let wrs: Vec<RecvWr<'_>> = groups
                    .iter()
                    .zip(&sges)
                    .map(|(g, s)| RecvWr {
                        wr_id: num(g, "id", 0),
                        sge: s,
                    })
                    .collect();
                if t[0] == "rbench" {
                    self.bench(t, id, Wrs::Recv(&wrs));
                    return;
                }
                // SAFETY: receive SGEs are never dereferenced (no device).
                let r = unsafe { self.qps[id].as_mut().unwrap().post_recv(kobj(), &wrs) };
                if let Err(e) = r {
                    let _ = writeln!(self.out, "  = err at {}", e.posted());
                }
            }
            "cqe" => {
                let imm = arg(t, "imm").map(|_| num(t, "imm", 0) as u32);
                self.put_cqe(
                    num(t, "cq", 1) as usize,
                    num(t, "sub", 0) as usize,
                    [
                        num(t, "req_id", 0) as u16,
                        num(t, "qpn", 0) as u16,
                        num(t, "len", 0) as u16,
                        num(t, "ah", 0) as u16,
                        num(t, "src_qp", 0) as u16,
                    ],
                    num(t, "recv", 0) != 0,
                    num(t, "status", 0) as u8,
                    imm,
                );
            }
            "poll" => {
                let id = num(t, "cq", 1) as usize;
                let n = num(t, "n", 1) as usize;
                let mut wc = vec![WorkCompletion::default(); n];
                let got = self.cqs[id].as_mut().unwrap().0.poll(&mut wc);
                for w in &wc[..got] {
                    let opcode = if w.status.0 == 0 {
                        w.opcode.0.to_string()
                    } else {
                        "-".to_string()
                    };
                    let _ = writeln!(
                        self.out,
                        "  wc wr_id {} status {} opcode {} qp 0x{:x} len {} flags 0x{:x} imm 0x{:x} src_qp 0x{:x} slid 0x{:x} vendor {}",
                        w.wr_id,
                        w.status.0,
                        opcode,
                        w.qp_num,
                        w.byte_len,
                        w.wc_flags.bits(),
                        w.imm_data,
                        w.src_qp,
                        w.slid,
                        w.vendor_err
                    );
                }
            }
            other => panic!("unknown step {other}"),
        }
    }

    /// A completion as the device writes it into sub-CQ `sub` of CQ `id` (harness.c
    /// `put_cqe`): the fields (`f`: req_id, qpn, length, AH, source QP), then the flags byte
    /// with the phase of the sub-CQ's current lap (1 first).
    #[allow(clippy::too_many_arguments)]
    fn put_cqe(
        &mut self,
        id: usize,
        sub: usize,
        f: [u16; 5],
        recv: bool,
        status: u8,
        imm: Option<u32>,
    ) {
        let mut c = [0u8; RX_CDESC];
        c[0..2].copy_from_slice(&f[0].to_le_bytes());
        c[2] = status;
        for (k, v) in f[1..].iter().enumerate() {
            c[4 + 2 * k..6 + 2 * k].copy_from_slice(&v.to_le_bytes());
        }
        c[12..16].copy_from_slice(&imm.unwrap_or(0).to_le_bytes());
        let e = self.cqs[id].as_mut().unwrap();
        let k = e.3[sub];
        e.3[sub] += 1;
        let mut flags = (if recv { 2u8 } else { 1 }) << 1;
        if imm.is_some() {
            flags |= 1 << 3;
        }
        flags |= u8::from((k / e.2) & 1 == 0);
        c[3] = flags;
        let slot = (sub * e.2 as usize + (k % e.2) as usize) * RX_CDESC;
        // SAFETY: a slot of the CQ's ring (fake kernel memory); the poller is not running.
        unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), e.1.add(slot), RX_CDESC) };
    }

    /// `bench`/`rbench`: posts the list `n` times through [`bench_post`]
    /// ([`bench_post_recv`]); after each post completes its requests outside the timed call
    /// and polls them, as the harness does (request ids `nw - 1` down to 0: those a fresh
    /// queue hands out, given back in the order that leaves its pool as it was).
    fn bench(&mut self, t: &[&str], id: usize, wrs: Wrs<'_, '_>) {
        let reps = num(t, "n", 1) as usize;
        let cq = num(t, "cq", 1) as usize;
        let sub = num(t, "sub", 0) as usize;
        let qpn = num(t, "qpn", 0) as u16;
        let nw = match wrs {
            Wrs::Send(w) => w.len(),
            Wrs::Recv(w) => w.len(),
        };
        let mut wc = vec![WorkCompletion::default(); nw];
        // ns per WR (stderr, outside the dump), measured as the harness does: the median of
        // each post timed with the monotonic clock, minus the median of an empty timed region.
        let k = kobj();
        let mut empty = Vec::with_capacity(reps);
        let mut spent = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = std::time::Instant::now();
            empty.push(t0.elapsed());
        }
        for _ in 0..reps {
            let qp = self.qps[id].as_mut().unwrap();
            let t0 = std::time::Instant::now();
            match wrs {
                Wrs::Send(w) => bench_post(qp.as_mut(), w, k),
                Wrs::Recv(w) => bench_post_recv(qp.as_mut(), w, k),
            }
            spent.push(t0.elapsed());
            for i in (0..nw as u16).rev() {
                let recv = matches!(wrs, Wrs::Recv(_));
                self.put_cqe(cq, sub, [i, qpn, 0, 0, 0], recv, 0, None);
            }
            assert_eq!(self.cqs[cq].as_mut().unwrap().0.poll(&mut wc), nw);
            assert!(wc.iter().all(|w| w.status.0 == 0));
        }
        spent.sort_unstable();
        empty.sort_unstable();
        let mid = reps / 2;
        eprintln!(
            "bench: {:.2} ns per WR",
            (spent[mid].as_nanos() as f64 - empty[mid].as_nanos() as f64) / nw as f64
        );
    }

    fn qp(&mut self, t: &[&str]) {
        let id: usize = t[1].parse().unwrap();
        let qp_type = match arg(t, "type").unwrap() {
            "srd" => QP_TYPE_DRIVER,
            "ud" => QpType::UD,
            "rc" => QpType::RC,
            _ => QpType::UC,
        };
        let caps = QpCaps {
            max_send_wr: num(t, "send_wr", 0) as u32,
            max_recv_wr: num(t, "recv_wr", 0) as u32,
            max_send_sge: num(t, "send_sge", 0) as u32,
            max_recv_sge: num(t, "recv_sge", 0) as u32,
            max_inline_data: num(t, "inline", 0) as u32,
        };
        let req = QpRequest {
            qp_type,
            caps,
            sq_sig_all: num(t, "sig_all", 0) != 0,
            has_srq: false,
            srq_handle: None,
        };
        let qpn = num(t, "qpn", 0x100 + id as u64) as u32;
        let (scq_idx, rcq_idx) = (num(t, "scq_idx", 0) as u16, num(t, "rcq_idx", 1) as u16);
        let llq_off = num(t, "llq_off", 0) as u32;
        let sq_db_off = num(t, "sq_db_off", 0) as u32;
        let rq_db_off = num(t, "rq_db_off", 0) as u32;
        let drv = self.driver.as_ref().unwrap();
        // `ops=` (libefa: the extended send API, `efa_check_qp_attr`): a QP asking for RDMA
        // READ that its type and device do not take is refused before the kernel is asked
        // (rverbs: `Qp`'s op set is the driver's; the C drop-in's `ibv_create_qp_ex` refuses
        // such `send_ops_flags`).
        if arg(t, "ops").is_some_and(|o| o.contains("read")) {
            let ops = if qp_type == QP_TYPE_DRIVER {
                drv.driver_qp().unwrap().ops
            } else {
                drv.send_caps().for_type(qp_type)
            };
            if !ops.contains(OpKind::RdmaRead) {
                self.out.push_str("  = err\n");
                return;
            }
        }
        // What the core sends in CREATE_QP (`Qp::create` asks the driver).
        let core = match drv.qp_caps_for_kernel(&req) {
            Ok(c) => c,
            Err(_) => {
                self.out.push_str("  = err\n");
                return;
            }
        };
        let mem = self.mem.clone();
        let mut udata = Vec::new();
        let mut resp = efa_ibv_create_qp_resp::default();
        let handle = self.next_handle;
        // SAFETY: the create contract as the fake kernel keeps it.
        let r = unsafe {
            drv.create_qp(fd(), &req, &mut |uin, uout| {
                udata = uin.to_vec();
                let c = efa_ibv_create_qp::read_from_bytes(uin).unwrap();
                resp.rq_db_offset = rq_db_off;
                resp.sq_db_offset = sq_db_off;
                resp.llq_desc_offset = llq_off;
                resp.rq_mmap_size = (c.rq_ring_size as usize).div_ceil(PAGE) as u64 * PAGE as u64;
                resp.rq_mmap_key = mem.new_mem(resp.rq_mmap_size as usize);
                resp.rq_db_mmap_key = mem.new_mem(PAGE);
                resp.sq_db_mmap_key = mem.new_mem(PAGE);
                resp.llq_desc_mmap_key = mem.new_mem(c.sq_ring_size as usize + llq_off as usize);
                resp.send_sub_cq_idx = scq_idx;
                resp.recv_sub_cq_idx = rcq_idx;
                uout.copy_from_slice(resp.as_bytes());
                // The kernel echoes the caps it was sent.
                Ok(QpCreated {
                    handle,
                    qp_num: qpn,
                    caps: core,
                })
            })
        };
        self.next_handle += 1;
        let ops = match r {
            Ok(o) => o,
            Err(_) => {
                self.out.push_str("  = err\n");
                return;
            }
        };
        let ty = if qp_type == QP_TYPE_DRIVER {
            0xff
        } else {
            qp_type.0
        };
        let _ = writeln!(
            self.out,
            "  core send_wr {} recv_wr {} send_sge {} recv_sge {} inline {} type {ty}",
            core.max_send_wr,
            core.max_recv_wr,
            core.max_send_sge,
            core.max_recv_sge,
            core.max_inline_data
        );
        let _ = writeln!(self.out, "  udata {}", hex(&udata));
        let c = ops.caps().unwrap();
        let _ = writeln!(
            self.out,
            "  caps send_wr {} recv_wr {} send_sge {} recv_sge {} inline {}",
            c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
        );
        let cu = efa_ibv_create_qp::read_from_bytes(&udata[..]).unwrap();
        let m = self.mem.clone();
        self.region(
            format!("qp{id}.rq"),
            m.ptr(resp.rq_mmap_key),
            cu.rq_ring_size as usize,
        );
        // SAFETY: offsets inside the pages the fake kernel made.
        unsafe {
            self.region(
                format!("qp{id}.rqdb"),
                m.ptr(resp.rq_db_mmap_key).add(rq_db_off as usize),
                4,
            );
            self.region(
                format!("qp{id}.llq"),
                m.ptr(resp.llq_desc_mmap_key).add(llq_off as usize),
                cu.sq_ring_size as usize,
            );
            self.region(
                format!("qp{id}.sqdb"),
                m.ptr(resp.sq_db_mmap_key).add(sq_db_off as usize),
                4,
            );
        }
        set(&mut self.qps, id, ops);
    }

    fn send_wr<'a>(&self, g: &[&str], sge: &'a [Sge]) -> SendWr<'a> {
        let op = match arg(g, "op").unwrap_or("send") {
            "send_imm" => SendOp::SendWithImm {
                imm: num(g, "imm", 0) as u32,
            },
            "read" => SendOp::RdmaRead {
                remote_addr: num(g, "raddr", 0),
                rkey: num(g, "rkey", 0) as u32,
            },
            _ => SendOp::Send,
        };
        let mut flags = SendFlags::empty();
        if let Some(f) = arg(g, "flags") {
            for (k, b) in [
                ("sig", SendFlags::SIGNALED),
                ("sol", SendFlags::SOLICITED),
                ("fence", SendFlags::FENCE),
                ("inline", SendFlags::INLINE),
            ] {
                if f.contains(k) {
                    flags |= b;
                }
            }
        }
        let ud = arg(g, "ah").map(|a| UdDest {
            ah_num: self.ahs[parse_num(a) as usize].unwrap(),
            ah_handle: 1,
            remote_qpn: num(g, "rqpn", 0) as u32,
            remote_qkey: num(g, "qkey", 0) as u32,
        });
        SendWr {
            wr_id: num(g, "id", 0),
            op,
            sge,
            flags,
            ud,
        }
    }

    fn finish(mut self) -> String {
        self.qps.clear();
        self.cqs.clear();
        self.driver = None;
        std::mem::take(&mut self.out)
    }
}

/// The work requests of a benchmark's list.
#[derive(Clone, Copy)]
enum Wrs<'a, 'b> {
    Send(&'a [SendWr<'b>]),
    Recv(&'a [RecvWr<'b>]),
}

/// The benchmark's send post: not inlined, so that callgrind can count it alone (the same
/// call the core's `Qp::post_send` makes through the seam, without the core's state check and
/// lock).
#[inline(never)]
fn bench_post(qp: &mut dyn QpOps, wrs: &[SendWr<'_>], k: rverbs_uverbs::driver::KernelObj<'_>) {
    // SAFETY: non-inline SGEs are never dereferenced (no device); inline ones name buffers
    // the run keeps.
    unsafe { qp.post_send(k, wrs) }.unwrap();
}

/// The benchmark's receive post, as [`bench_post`].
#[inline(never)]
fn bench_post_recv(
    qp: &mut dyn QpOps,
    wrs: &[RecvWr<'_>],
    k: rverbs_uverbs::driver::KernelObj<'_>,
) {
    // SAFETY: receive SGEs are never dereferenced (no device).
    unsafe { qp.post_recv(k, wrs) }.unwrap();
}

/// rverbs' dump of `script`.
fn run(script: &str) -> String {
    let mut r = Run::default();
    let mut n = 0;
    for line in script.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.is_empty() || t[0].starts_with('#') {
            continue;
        }
        n += 1;
        let _ = writeln!(r.out, "step {n}: {line}");
        r.step(&t);
        r.dump();
    }
    r.finish()
}

/// The committed scripts and libefa's dumps of them, built in. `cargo xtask efa-oracle`
/// lists the same directory; a script missing here fails its `--check`.
macro_rules! scripts {
    ($($name:literal),* $(,)?) => {
        [$(($name,
            include_str!(concat!("../../tests/efa_oracle/", $name, ".script")),
            include_str!(concat!("../../tests/efa_oracle/", $name, ".golden")))),*]
    };
}

/// Every script in `tests/efa_oracle/`.
pub const SCRIPTS: [(&str, &str, &str); 6] = scripts![
    "batch_and_refusals",
    "create_refusals",
    "sq_cq_wrap",
    "srd_rdma_read",
    "srd_send_recv",
    "ud_send_recv",
];

/// Every committed script: rverbs' dump is identical to libefa's golden one.
#[test]
fn efa_oracle_scripts_match_libefa() {
    if let Ok(s) = std::env::var("EFA_ORACLE_SCRIPT") {
        let text = std::fs::read_to_string(&s).unwrap();
        let out = run(&text);
        let dest = std::env::var("EFA_ORACLE_OUT").expect("EFA_ORACLE_OUT");
        std::fs::write(dest, out).unwrap();
        return;
    }
    let mut failed = Vec::new();
    for (name, script, golden) in SCRIPTS {
        if let Err(e) = compare(golden, &run(script)) {
            failed.push(format!("{name}.script: {e}"));
        }
    }
    assert!(
        failed.is_empty(),
        "rverbs differs from libefa:\n{}",
        failed.join("\n")
    );
}

/// The ABI structs have the header's sizes (`efa-abi.h`).
#[test]
fn efa_abi_sizes() {
    use std::mem::size_of;
    assert_eq!(size_of::<efa_ibv_alloc_ucontext_cmd>(), 8);
    assert_eq!(size_of::<efa_ibv_alloc_ucontext_resp>(), 24);
    assert_eq!(size_of::<efa_ibv_create_cq>(), 16);
    assert_eq!(size_of::<efa_ibv_create_cq_resp>(), 40);
    assert_eq!(size_of::<efa_ibv_create_qp>(), 16);
    assert_eq!(size_of::<efa_ibv_create_qp_resp>(), 64);
    assert_eq!(size_of::<efa_ibv_create_ah_resp>(), 8);
    assert_eq!(size_of::<efa_ibv_ex_query_device_resp>(), 24);
}
