//! The battery planner: which cases run on a device, and why the others are skipped. Pure:
//! it reads only [`Facts`] (what the device's attributes and transport say), so every rule
//! is tested on the host.

use rverbs::uverbs::device::Transport;
use rverbs::uverbs::device_attr::AtomicCap;

/// One case of the battery. Each runs on its own objects (its own context, PD, CQs, QPs), in
/// loopback on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Case {
    /// RC SEND into a posted receive, payload and byte_len checked.
    RcSend,
    /// RC SEND with immediate data (the immediate in host order at the receiver).
    RcSendImm,
    /// RC RDMA WRITE into the peer's memory.
    RcWrite,
    /// RC RDMA WRITE with immediate (consumes a receive: RECV_RDMA_WITH_IMM).
    RcWriteImm,
    /// RC RDMA READ of the peer's memory.
    RcRead,
    /// RC SEND with INLINE data (copied at post time).
    RcInline,
    /// RC atomic fetch-and-add: the old value back, the new one in the peer's memory.
    RcFetchAdd,
    /// RC atomic compare-and-swap, one that swaps and one that does not.
    RcCmpSwap,
    /// RC receives taken from a shared receive queue.
    RcSrq,
    /// A completion event on a completion channel after arming the CQ.
    RcEvents,
    /// An RDMA WRITE with a wrong rkey: REM_ACCESS_ERR at the requester.
    RcErrRkey,
    /// A SEND whose SGE has a wrong lkey: a local error at the requester, nothing sent.
    RcErrLkey,
    /// Requests posted to a QP in ERROR: WR_FLUSH_ERR.
    RcErrFlush,
    /// UC SEND.
    UcSend,
    /// UC RDMA WRITE with immediate.
    UcWriteImm,
    /// UD SEND through an address handle to the device's own GID.
    UdSend,
    /// RC through the rdma_cm (the only way an iWARP QP connects): SEND/RECV, WRITE, READ.
    CmRc,
    /// SRD (EFA) SEND with immediate through an address handle to the device's own GID.
    SrdSend,
}

impl Case {
    /// Every case, in the order the battery runs and reports them.
    pub const ALL: [Case; 18] = [
        Case::RcSend,
        Case::RcSendImm,
        Case::RcWrite,
        Case::RcWriteImm,
        Case::RcRead,
        Case::RcInline,
        Case::RcFetchAdd,
        Case::RcCmpSwap,
        Case::RcSrq,
        Case::RcEvents,
        Case::RcErrRkey,
        Case::RcErrLkey,
        Case::RcErrFlush,
        Case::UcSend,
        Case::UcWriteImm,
        Case::UdSend,
        Case::CmRc,
        Case::SrdSend,
    ];

    /// The name printed and written to the JSON report (and given to `--case`/`--force`).
    pub const fn name(self) -> &'static str {
        match self {
            Case::RcSend => "rc-send",
            Case::RcSendImm => "rc-send-imm",
            Case::RcWrite => "rc-write",
            Case::RcWriteImm => "rc-write-imm",
            Case::RcRead => "rc-read",
            Case::RcInline => "rc-inline",
            Case::RcFetchAdd => "rc-atomic-fetch-add",
            Case::RcCmpSwap => "rc-atomic-cmp-swap",
            Case::RcSrq => "rc-srq",
            Case::RcEvents => "rc-events",
            Case::RcErrRkey => "rc-error-rkey",
            Case::RcErrLkey => "rc-error-lkey",
            Case::RcErrFlush => "rc-error-flush",
            Case::UcSend => "uc-send",
            Case::UcWriteImm => "uc-write-imm",
            Case::UdSend => "ud-send",
            Case::CmRc => "cm-rc",
            Case::SrdSend => "srd-send",
        }
    }

    /// The case called `name`.
    pub fn from_name(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the case connects QPs by hand (every case but the rdma_cm one) where it can:
    /// on iWARP, where an RC QP connects only through the rdma_cm, those of RC connect
    /// through it too, and need its address.
    const fn by_hand(self) -> bool {
        !matches!(self, Case::CmRc | Case::SrdSend)
    }
}

/// What the planner needs to know about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub transport: Transport,
    /// `atomic_cap` of the device attributes.
    pub atomic_cap: AtomicCap,
    /// `max_srq` of the device attributes.
    pub max_srq: u32,
    /// The IP address the rdma_cm case binds and connects to, when one is known (`-a`, or
    /// the device's RoCE v2 IPv4 GID).
    pub cm_addr: Option<String>,
    /// The device is an EFA (its provider's own QP type is SRD; it has UD, no RC or UC).
    pub efa: bool,
}

/// Whether a case runs, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    Run,
    Skip(String),
}

/// Decides the fate of `case` on a device with `facts`.
pub fn plan(case: Case, f: &Facts) -> Plan {
    let skip = |why: &str| Plan::Skip(why.to_string());
    if f.efa {
        return match case {
            Case::UdSend | Case::SrdSend => Plan::Run,
            _ => skip("EFA has UD and SRD QPs only (no RC, no UC)"),
        };
    }
    if case == Case::SrdSend {
        return skip("SRD is EFA's transport");
    }
    if f.transport == Transport::IWARP {
        match case {
            Case::UcSend | Case::UcWriteImm => return skip("iWARP has no UC QPs"),
            Case::UdSend => return skip("iWARP has no UD QPs"),
            Case::RcFetchAdd | Case::RcCmpSwap => return skip("iWARP has no atomic operations"),
            Case::RcSendImm | Case::RcWriteImm => return skip("iWARP has no immediate data"),
            _ if case.by_hand() && f.cm_addr.is_none() => {
                return skip(
                    "iWARP: an RC QP connects only through the rdma_cm, and no IPv4 address \
                     of the device was found (the rdma_cm binds none of the machine's \
                     addresses to it): give -a ADDR",
                )
            }
            _ => {}
        }
    }
    if f.transport != Transport::IB && f.transport != Transport::IWARP {
        return Plan::Skip(format!(
            "transport {} is neither InfiniBand/RoCE nor iWARP",
            f.transport.name().unwrap_or("unknown")
        ));
    }
    match case {
        Case::RcFetchAdd | Case::RcCmpSwap if f.atomic_cap == AtomicCap::NONE => {
            skip("atomic_cap is ATOMIC_NONE: the device does no atomics")
        }
        Case::RcSrq if f.max_srq == 0 => skip("max_srq is 0: the device has no SRQs"),
        Case::CmRc if f.cm_addr.is_none() => skip(
            "no IPv4 address of the device found (no RoCE v2 IPv4 GID, and the rdma_cm binds \
                 none of the machine's addresses to it): give -a ADDR",
        ),
        _ => Plan::Run,
    }
}

/// The battery: `selected` cases (all when empty), each planned, with `forced` ones run
/// whatever the planner says.
pub fn battery(f: &Facts, selected: &[Case], forced: &[Case]) -> Vec<(Case, Plan)> {
    Case::ALL
        .into_iter()
        .filter(|c| selected.is_empty() || selected.contains(c) || forced.contains(c))
        .map(|c| {
            let p = if forced.contains(&c) {
                Plan::Run
            } else {
                plan(c, f)
            };
            (c, p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roce() -> Facts {
        Facts {
            transport: Transport::IB,
            atomic_cap: AtomicCap::HCA,
            max_srq: 1024,
            cm_addr: Some("10.0.0.1".into()),
            efa: false,
        }
    }

    fn iwarp() -> Facts {
        Facts {
            transport: Transport::IWARP,
            atomic_cap: AtomicCap::NONE,
            max_srq: 1024,
            cm_addr: Some("10.0.0.1".into()),
            efa: false,
        }
    }

    fn efa() -> Facts {
        Facts {
            transport: Transport::UNSPECIFIED,
            atomic_cap: AtomicCap::NONE,
            max_srq: 0,
            cm_addr: None,
            efa: true,
        }
    }

    #[test]
    fn efa_runs_ud_and_srd_and_says_why_for_the_others() {
        let f = efa();
        assert_eq!(runs(&f), ["ud-send", "srd-send"]);
        assert_eq!(
            reason(Case::RcSend, &f),
            "EFA has UD and SRD QPs only (no RC, no UC)"
        );
        assert_eq!(reason(Case::SrdSend, &roce()), "SRD is EFA's transport");
        assert_eq!(reason(Case::SrdSend, &iwarp()), "SRD is EFA's transport");
    }

    fn runs(f: &Facts) -> Vec<&'static str> {
        battery(f, &[], &[])
            .into_iter()
            .filter(|(_, p)| *p == Plan::Run)
            .map(|(c, _)| c.name())
            .collect()
    }

    fn reason(c: Case, f: &Facts) -> String {
        match plan(c, f) {
            Plan::Skip(r) => r,
            Plan::Run => panic!("{} runs", c.name()),
        }
    }

    #[test]
    fn names_are_unique_and_round_trip() {
        for (i, a) in Case::ALL.iter().enumerate() {
            assert_eq!(Case::from_name(a.name()), Some(*a));
            for b in &Case::ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
        assert_eq!(Case::from_name("rc-sendx"), None);
    }

    #[test]
    fn a_roce_device_with_everything_runs_every_case() {
        // Every case but EFA's SRD.
        assert_eq!(runs(&roce()).len(), Case::ALL.len() - 1);
    }

    #[test]
    fn iwarp_runs_the_rc_cases_it_can_and_says_why_for_the_others() {
        let f = iwarp();
        assert_eq!(
            runs(&f),
            [
                "rc-send",
                "rc-write",
                "rc-read",
                "rc-inline",
                "rc-srq",
                "rc-events",
                "rc-error-rkey",
                "rc-error-lkey",
                "rc-error-flush",
                "cm-rc"
            ]
        );
        assert_eq!(reason(Case::UdSend, &f), "iWARP has no UD QPs");
        assert_eq!(reason(Case::UcSend, &f), "iWARP has no UC QPs");
        assert_eq!(reason(Case::UcWriteImm, &f), "iWARP has no UC QPs");
        assert_eq!(
            reason(Case::RcFetchAdd, &f),
            "iWARP has no atomic operations"
        );
        assert_eq!(
            reason(Case::RcCmpSwap, &f),
            "iWARP has no atomic operations"
        );
        assert_eq!(reason(Case::RcSendImm, &f), "iWARP has no immediate data");
        assert_eq!(reason(Case::RcWriteImm, &f), "iWARP has no immediate data");
    }

    #[test]
    fn iwarp_rc_cases_need_the_rdma_cm_address() {
        let mut f = iwarp();
        f.cm_addr = None;
        assert!(runs(&f).is_empty());
        for c in [Case::RcSend, Case::RcSrq, Case::RcEvents, Case::RcErrFlush] {
            let r = reason(c, &f);
            assert!(
                r.contains("only through the rdma_cm") && r.contains("give -a ADDR"),
                "{r}"
            );
        }
        // What iWARP cannot do is said as such, address or not.
        assert_eq!(reason(Case::UdSend, &f), "iWARP has no UD QPs");
        // No SRQs: said before the address.
        f.max_srq = 0;
        f.cm_addr = Some("10.0.0.1".into());
        assert_eq!(
            reason(Case::RcSrq, &f),
            "max_srq is 0: the device has no SRQs"
        );
    }

    #[test]
    fn atomics_follow_atomic_cap() {
        let mut f = roce();
        f.atomic_cap = AtomicCap::NONE;
        let r = runs(&f);
        assert!(!r.contains(&"rc-atomic-fetch-add") && !r.contains(&"rc-atomic-cmp-swap"));
        assert_eq!(r.len(), Case::ALL.len() - 3);
        assert!(reason(Case::RcCmpSwap, &f).contains("ATOMIC_NONE"));
        f.atomic_cap = AtomicCap::GLOB;
        assert_eq!(plan(Case::RcFetchAdd, &f), Plan::Run);
    }

    #[test]
    fn srq_follows_max_srq() {
        let mut f = roce();
        f.max_srq = 0;
        assert_eq!(
            reason(Case::RcSrq, &f),
            "max_srq is 0: the device has no SRQs"
        );
        // rc-srq, and EFA's srd-send.
        assert_eq!(runs(&f).len(), Case::ALL.len() - 2);
    }

    #[test]
    fn the_rdma_cm_case_needs_an_address() {
        for mut f in [roce(), iwarp()] {
            f.cm_addr = None;
            assert!(reason(Case::CmRc, &f).contains("give -a ADDR"));
        }
    }

    #[test]
    fn other_transports_skip_everything() {
        let f = Facts {
            transport: Transport::USNIC,
            ..roce()
        };
        assert!(runs(&f).is_empty());
        assert!(reason(Case::RcSend, &f).contains("neither InfiniBand/RoCE nor iWARP"));
    }

    #[test]
    fn selection_keeps_the_battery_order_and_force_overrides_a_skip() {
        let f = iwarp();
        let b = battery(&f, &[Case::CmRc, Case::RcSend], &[]);
        assert_eq!(
            b.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            [Case::RcSend, Case::CmRc]
        );
        assert_eq!(b[0].1, Plan::Run);
        let b = battery(&f, &[Case::CmRc, Case::RcSendImm], &[]);
        assert!(matches!(b[0].1, Plan::Skip(_)));
        let b = battery(&f, &[Case::CmRc], &[Case::UdSend]);
        assert_eq!(
            b,
            [(Case::UdSend, Plan::Run), (Case::CmRc, Plan::Run)],
            "a forced case runs even when not selected"
        );
    }
}
