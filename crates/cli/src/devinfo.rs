//! `rverbs devinfo`: device and port attributes, laid out like rdma-core's `ibv_devinfo`
//! (v44), field for field, so the two can be compared line by line.
//!
//! Differences by design: driver-private capabilities that rdma-core's mlx5 provider reads
//! from its own driver data (TSO, packet pacing, RSS hash fields) print as zero here, and
//! errors are `rverbs devinfo: <what went wrong>` with exit status 1.
//!
//! A device whose kernel driver rverbs has no provider for (siw before its provider, efa,
//! irdma, ...) is listed, not omitted and not an error: its sysfs identity and a `support:`
//! line naming the driver and the providers rverbs has. No context is opened on it (a
//! driver may refuse a context without its provider's private data, as siw does).

use std::ffi::OsString;
use std::fmt::Write as _;

use rverbs::provider::{provider_for, PROVIDERS};
use rverbs::uverbs::device::{devices, format_guid, Device, DriverId, Transport};
use rverbs::uverbs::device_attr::{AtomicCap, DeviceAttr};
use rverbs::uverbs::gid::{GidEntry, GidType};
use rverbs::uverbs::port::{LinkLayer, Mtu, PortAttr, PortState};

use crate::{usage_err, CmdResult};

pub const USAGE: &str = "\
Usage: rverbs devinfo [-d DEV] [-i PORT] [-v] [-l]

Print the attributes of the RDMA devices (all of them, or DEV) and their ports.

  -d, --ib-dev DEV     only device DEV
  -i, --ib-port PORT   only port PORT (1-based)
  -v, --verbose        all attributes, and each port's GID table
  -l, --list           only the device names
";

/// Parsed `rverbs devinfo` options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Opts {
    pub dev: Option<String>,
    pub port: Option<u32>,
    pub verbose: bool,
    pub list: bool,
    pub help: bool,
}

/// Parses the arguments after `devinfo`.
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('d') | Long("ib-dev") => o.dev = Some(p.value()?.string()?),
            Short('i') | Long("ib-port") => {
                let v = p.value()?.string()?;
                o.port = Some(match v.parse::<u32>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(usage_err(format!(
                            "bad port {v:?}: ports are numbered from 1"
                        )))
                    }
                });
            }
            Short('v') | Long("verbose") => o.verbose = true,
            Short('l') | Long("list") => o.list = true,
            Short('h') | Long("help") => o.help = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(o)
}

/// Everything `devinfo` prints about one device.
#[derive(Debug, Clone, Default)]
pub struct HcaInfo {
    pub name: String,
    pub transport: Transport,
    /// sysfs `board_id`, when the device has one.
    pub board_id: Option<String>,
    pub attr: DeviceAttr,
    pub num_comp_vectors: u32,
    pub ports: Vec<PortInfo>,
}

/// One port and (verbose) its GIDs.
#[derive(Debug, Clone, Default)]
pub struct PortInfo {
    pub port: u32,
    pub attr: PortAttr,
    pub gids: Vec<GidEntry>,
}

fn port_state_str(s: PortState) -> &'static str {
    match s {
        PortState::DOWN => "PORT_DOWN",
        PortState::INIT => "PORT_INIT",
        PortState::ARMED => "PORT_ARMED",
        PortState::ACTIVE => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING", // sic, as ibv_devinfo prints it
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

fn atomic_cap_str(a: AtomicCap) -> &'static str {
    match a {
        AtomicCap::NONE => "ATOMIC_NONE",
        AtomicCap::HCA => "ATOMIC_HCA",
        AtomicCap::GLOB => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

fn mtu_str(m: Mtu) -> &'static str {
    m.name().unwrap_or("invalid MTU")
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn link_layer_str(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::UNSPECIFIED | LinkLayer::INFINIBAND => "InfiniBand",
        LinkLayer::ETHERNET => "Ethernet",
        _ => "Unknown",
    }
}

/// `IBV_DEVICE_*` names in the order ibv_devinfo prints them.
const DEVICE_CAP_FLAGS: &[(u32, &str)] = &[
    (1 << 0, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

const FLAG_INDENT: &str = "\t\t\t\t\t";

fn flags32(s: &mut String, v: u32, names: &[(u32, &str)]) {
    let mut known = 0;
    for &(bit, name) in names {
        known |= bit;
        if v & bit != 0 {
            let _ = writeln!(s, "{FLAG_INDENT}{name}");
        }
    }
    if v & !known != 0 {
        let _ = writeln!(s, "{FLAG_INDENT}Unknown flags: 0x{:X}", v & !known);
    }
}

fn odp_trans(s: &mut String, v: u32) {
    if v == 0 {
        let _ = writeln!(s, "{FLAG_INDENT}NO SUPPORT");
        return;
    }
    flags32(
        s,
        v,
        &[
            (1 << 0, "SUPPORT_SEND"),
            (1 << 1, "SUPPORT_RECV"),
            (1 << 2, "SUPPORT_WRITE"),
            (1 << 3, "SUPPORT_READ"),
            (1 << 4, "SUPPORT_ATOMIC"),
            (1 << 5, "SUPPORT_SRQ"),
        ],
    );
}

/// `IBV_QPT_RAW_PACKET` / `IBV_QPT_UD` support bits as ibv_devinfo lists them.
fn supported_qpts(s: &mut String, qpts: u32) {
    const RAW: u32 = 1 << 8;
    const UD: u32 = 1 << 4;
    if qpts & RAW != 0 {
        let _ = writeln!(s, "{FLAG_INDENT}SUPPORT_RAW_PACKET");
    }
    if qpts & UD != 0 {
        let _ = writeln!(s, "{FLAG_INDENT}SUPPORT_UD");
    }
    if qpts & !(RAW | UD) != 0 {
        let _ = writeln!(s, "{FLAG_INDENT}Unknown flags: 0x{:X}", qpts & !(RAW | UD));
    }
}

/// A GID as ibv_devinfo prints it, or `None` for entries it skips (interface id zero, or a
/// type it does not know).
pub fn gid_line(e: &GidEntry, link_layer: LinkLayer) -> Option<String> {
    if e.gid.0[8..].iter().all(|&b| b == 0) {
        return None;
    }
    let (text, type_name) = match e.gid_type {
        GidType::ROCE_V2 => (e.gid.to_string(), "RoCE v2"),
        // sysfs says "IB/RoCE v1" for both; ibv_devinfo calls it RoCE v1.
        GidType::IB | GidType::ROCE_V1 => {
            let b = e.gid.0;
            let groups: Vec<String> = b
                .chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect();
            (groups.join(":"), "RoCE v1")
        }
        _ => return None,
    };
    let suffix = if link_layer == LinkLayer::ETHERNET {
        format!(", {type_name}")
    } else {
        String::new()
    };
    Some(format!("\t\t\tGID[{:3}]:\t\t{text}{suffix}", e.index))
}

/// The text ibv_devinfo prints for one device.
pub fn format_hca(h: &HcaInfo, verbose: bool) -> String {
    let a = &h.attr;
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "hca_id:\t{}", h.name);
    let _ = writeln!(
        w,
        "\ttransport:\t\t\t{} ({})",
        h.transport.name().unwrap_or("invalid transport"),
        h.transport.0
    );
    if !a.fw_ver.is_empty() {
        let _ = writeln!(w, "\tfw_ver:\t\t\t\t{}", a.fw_ver);
    }
    let _ = writeln!(w, "\tnode_guid:\t\t\t{}", format_guid(a.node_guid));
    let _ = writeln!(
        w,
        "\tsys_image_guid:\t\t\t{}",
        format_guid(a.sys_image_guid)
    );
    let _ = writeln!(w, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(w, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id as i32);
    let _ = writeln!(w, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    if let Some(b) = h.board_id.as_deref().filter(|b| !b.is_empty()) {
        let _ = writeln!(w, "\tboard_id:\t\t\t{b}");
    }
    let _ = writeln!(w, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if verbose {
        format_verbose_device(w, h);
    }
    for p in &h.ports {
        format_port(w, h.transport, p, verbose);
    }
    s
}

fn format_verbose_device(w: &mut String, h: &HcaInfo) {
    let a = &h.attr;
    // ibv_devinfo prints the 32-bit limits with %d.
    let d = |v: u32| v as i32;
    let _ = writeln!(w, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(w, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(w, "\tmax_qp:\t\t\t\t{}", d(a.max_qp));
    let _ = writeln!(w, "\tmax_qp_wr:\t\t\t{}", d(a.max_qp_wr));
    let _ = writeln!(w, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
    flags32(w, a.device_cap_flags, DEVICE_CAP_FLAGS);
    let _ = writeln!(w, "\tmax_sge:\t\t\t{}", d(a.max_sge));
    let _ = writeln!(w, "\tmax_sge_rd:\t\t\t{}", d(a.max_sge_rd));
    let _ = writeln!(w, "\tmax_cq:\t\t\t\t{}", d(a.max_cq));
    let _ = writeln!(w, "\tmax_cqe:\t\t\t{}", d(a.max_cqe));
    let _ = writeln!(w, "\tmax_mr:\t\t\t\t{}", d(a.max_mr));
    let _ = writeln!(w, "\tmax_pd:\t\t\t\t{}", d(a.max_pd));
    let _ = writeln!(w, "\tmax_qp_rd_atom:\t\t\t{}", d(a.max_qp_rd_atom));
    let _ = writeln!(w, "\tmax_ee_rd_atom:\t\t\t{}", d(a.max_ee_rd_atom));
    let _ = writeln!(w, "\tmax_res_rd_atom:\t\t{}", d(a.max_res_rd_atom));
    let _ = writeln!(w, "\tmax_qp_init_rd_atom:\t\t{}", d(a.max_qp_init_rd_atom));
    let _ = writeln!(w, "\tmax_ee_init_rd_atom:\t\t{}", d(a.max_ee_init_rd_atom));
    let _ = writeln!(
        w,
        "\tatomic_cap:\t\t\t{} ({})",
        atomic_cap_str(a.atomic_cap),
        a.atomic_cap.0 as i32
    );
    let _ = writeln!(w, "\tmax_ee:\t\t\t\t{}", d(a.max_ee));
    let _ = writeln!(w, "\tmax_rdd:\t\t\t{}", d(a.max_rdd));
    let _ = writeln!(w, "\tmax_mw:\t\t\t\t{}", d(a.max_mw));
    let _ = writeln!(w, "\tmax_raw_ipv6_qp:\t\t{}", d(a.max_raw_ipv6_qp));
    let _ = writeln!(w, "\tmax_raw_ethy_qp:\t\t{}", d(a.max_raw_ethy_qp));
    let _ = writeln!(w, "\tmax_mcast_grp:\t\t\t{}", d(a.max_mcast_grp));
    let _ = writeln!(w, "\tmax_mcast_qp_attach:\t\t{}", d(a.max_mcast_qp_attach));
    let _ = writeln!(
        w,
        "\tmax_total_mcast_qp_attach:\t{}",
        d(a.max_total_mcast_qp_attach)
    );
    let _ = writeln!(w, "\tmax_ah:\t\t\t\t{}", d(a.max_ah));
    let _ = writeln!(w, "\tmax_fmr:\t\t\t{}", d(a.max_fmr));
    if a.max_fmr != 0 {
        let _ = writeln!(w, "\tmax_map_per_fmr:\t\t{}", d(a.max_map_per_fmr));
    }
    let _ = writeln!(w, "\tmax_srq:\t\t\t{}", d(a.max_srq));
    if a.max_srq != 0 {
        let _ = writeln!(w, "\tmax_srq_wr:\t\t\t{}", d(a.max_srq_wr));
        let _ = writeln!(w, "\tmax_srq_sge:\t\t\t{}", d(a.max_srq_sge));
    }
    let _ = writeln!(w, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
    let _ = writeln!(w, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);

    let odp = &a.odp_caps;
    let general = odp.general_caps.bits();
    let _ = writeln!(w, "\tgeneral_odp_caps:");
    if general & 1 != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}ODP_SUPPORT");
    }
    if general & 2 != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}ODP_SUPPORT_IMPLICIT");
    }
    if general & !3 != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}Unknown flags: 0x{:X}", general & !3);
    }
    for (name, v) in [
        ("rc", odp.rc_odp_caps.bits()),
        ("uc", odp.uc_odp_caps.bits()),
        ("ud", odp.ud_odp_caps.bits()),
        ("xrc", odp.xrc_odp_caps.bits()),
    ] {
        let _ = writeln!(w, "\t{name}_odp_caps:");
        odp_trans(w, v);
    }
    if a.completion_timestamp_mask != 0 {
        let _ = writeln!(
            w,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            a.completion_timestamp_mask
        );
    } else {
        let _ = writeln!(w, "\tcompletion_timestamp_mask not supported");
    }
    if a.hca_core_clock != 0 {
        let _ = writeln!(w, "\thca_core_clock:\t\t\t{}kHZ", a.hca_core_clock);
    } else {
        let _ = writeln!(w, "\tcore clock not supported");
    }
    if a.raw_packet_caps != 0 {
        let _ = writeln!(w, "\traw packet caps:");
        for (bit, name) in [
            (1, "C-VLAN stripping offload"),
            (2, "Scatter FCS offload"),
            (4, "IP csum offload"),
            (8, "Delay drop"),
        ] {
            if a.raw_packet_caps & bit != 0 {
                let _ = writeln!(w, "{FLAG_INDENT}{name}");
            }
        }
    }
    let _ = writeln!(w, "\tdevice_cap_flags_ex:\t\t0x{:X}", a.device_cap_flags_ex);
    let ex = a.device_cap_flags_ex & 0xffff_ffff_0000_0000;
    const RAW_SCATTER_FCS: u64 = 1 << 34;
    const PCI_WRITE_END_PADDING: u64 = 1 << 36;
    if ex & RAW_SCATTER_FCS != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}RAW_SCATTER_FCS");
    }
    if ex & PCI_WRITE_END_PADDING != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}PCI_WRITE_END_PADDING");
    }
    let unknown = ex & !(RAW_SCATTER_FCS | PCI_WRITE_END_PADDING);
    if unknown != 0 {
        let _ = writeln!(w, "{FLAG_INDENT}Unknown flags: 0x{unknown:X}");
    }
    // TSO caps are mlx5 driver data: none here.
    let _ = writeln!(w, "\ttso_caps:");
    let _ = writeln!(w, "\t\tmax_tso:\t\t\t0");
    let r = &a.rss_caps;
    let _ = writeln!(w, "\trss_caps:");
    let _ = writeln!(
        w,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        r.max_rwq_indirection_tables
    );
    let _ = writeln!(
        w,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        r.max_rwq_indirection_table_size
    );
    let _ = writeln!(w, "\t\trx_hash_function:\t\t\t\t0x0");
    let _ = writeln!(w, "\t\trx_hash_fields_mask:\t\t\t\t0x0");
    if r.supported_qpts != 0 {
        let _ = writeln!(w, "\t\tsupported_qp:");
        supported_qpts(w, r.supported_qpts);
    }
    let _ = writeln!(w, "\tmax_wq_type_rq:\t\t\t{}", a.max_wq_type_rq);
    let _ = writeln!(w, "\tpacket_pacing_caps:");
    let _ = writeln!(w, "\t\tqp_rate_limit_min:\t0kbps");
    let _ = writeln!(w, "\t\tqp_rate_limit_max:\t0kbps");
    let tm = &a.tm_caps;
    if tm.max_num_tags != 0 {
        let _ = writeln!(w, "\tmax_rndv_hdr_size:\t\t{}", tm.max_rndv_hdr_size);
        let _ = writeln!(w, "\tmax_num_tags:\t\t\t{}", tm.max_num_tags);
        let _ = writeln!(w, "\tmax_ops:\t\t\t{}", tm.max_ops);
        let _ = writeln!(w, "\tmax_sge:\t\t\t{}", tm.max_sge);
        let _ = writeln!(w, "\tflags:");
        if tm.flags & 1 != 0 {
            let _ = writeln!(w, "{FLAG_INDENT}IBV_TM_CAP_RC");
        }
    } else {
        let _ = writeln!(w, "\ttag matching not supported");
    }
    let cq = &a.cq_mod_caps;
    if cq.max_cq_count != 0 && cq.max_cq_period != 0 {
        let _ = write!(
            w,
            "\n\tcq moderation caps:\n\t\tmax_cq_count:\t{}\n\t\tmax_cq_period:\t{} us\n\n",
            cq.max_cq_count, cq.max_cq_period
        );
    }
    if a.max_dm_size != 0 {
        let _ = write!(
            w,
            "\tmaximum available device memory:\t{}Bytes\n\n",
            a.max_dm_size
        );
    }
    let _ = writeln!(w, "\tnum_comp_vectors:\t\t{}", h.num_comp_vectors as i32);
}

fn format_port(w: &mut String, transport: Transport, p: &PortInfo, verbose: bool) {
    let a = &p.attr;
    let _ = writeln!(w, "\t\tport:\t{}", p.port);
    let _ = writeln!(
        w,
        "\t\t\tstate:\t\t\t{} ({})",
        port_state_str(a.state),
        a.state.0
    );
    let _ = writeln!(
        w,
        "\t\t\tmax_mtu:\t\t{} ({})",
        mtu_str(a.max_mtu),
        a.max_mtu.0
    );
    let _ = writeln!(
        w,
        "\t\t\tactive_mtu:\t\t{} ({})",
        mtu_str(a.active_mtu),
        a.active_mtu.0
    );
    let _ = writeln!(w, "\t\t\tsm_lid:\t\t\t{}", a.sm_lid);
    let _ = writeln!(w, "\t\t\tport_lid:\t\t{}", a.lid);
    let _ = writeln!(w, "\t\t\tport_lmc:\t\t0x{:02x}", a.lmc);
    let _ = writeln!(w, "\t\t\tlink_layer:\t\t{}", link_layer_str(a.link_layer));
    if verbose {
        let _ = writeln!(w, "\t\t\tmax_msg_sz:\t\t0x{:x}", a.max_msg_sz);
        let _ = writeln!(w, "\t\t\tport_cap_flags:\t\t0x{:08x}", a.port_cap_flags);
        let _ = writeln!(w, "\t\t\tport_cap_flags2:\t0x{:04x}", a.port_cap_flags2);
        let _ = writeln!(
            w,
            "\t\t\tmax_vl_num:\t\t{} ({})",
            vl_str(a.max_vl_num),
            a.max_vl_num
        );
        let _ = writeln!(w, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", a.bad_pkey_cntr);
        let _ = writeln!(w, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", a.qkey_viol_cntr);
        let _ = writeln!(w, "\t\t\tsm_sl:\t\t\t{}", a.sm_sl);
        let _ = writeln!(w, "\t\t\tpkey_tbl_len:\t\t{}", a.pkey_tbl_len);
        let _ = writeln!(w, "\t\t\tgid_tbl_len:\t\t{}", a.gid_tbl_len as i32);
        let _ = writeln!(w, "\t\t\tsubnet_timeout:\t\t{}", a.subnet_timeout);
        let _ = writeln!(w, "\t\t\tinit_type_reply:\t{}", a.init_type_reply);
        let _ = writeln!(
            w,
            "\t\t\tactive_width:\t\t{}X ({})",
            width_str(a.active_width),
            a.active_width
        );
        let _ = writeln!(
            w,
            "\t\t\tactive_speed:\t\t{} ({})",
            speed_str(a.active_speed),
            a.active_speed
        );
        if transport == Transport::IB {
            let _ = writeln!(
                w,
                "\t\t\tphys_state:\t\t{} ({})",
                phys_state_str(a.phys_state.0),
                a.phys_state.0
            );
        }
        let mut gids: Vec<&GidEntry> = p
            .gids
            .iter()
            .filter(|e| e.port == p.port && e.index < a.gid_tbl_len)
            .collect();
        gids.sort_by_key(|e| e.index);
        for e in gids {
            if let Some(line) = gid_line(e, a.link_layer) {
                let _ = writeln!(w, "{line}");
            }
        }
    }
    let _ = writeln!(w);
}

/// Queries one device the way ibv_devinfo does: through its provider, as ibv_devinfo goes
/// through rdma-core's (a driver may refuse a context without its provider's private data, as
/// siw does; for rxe the calls are those of a plain `Context::open`).
pub fn gather(dev: &Device, port: Option<u32>, verbose: bool) -> std::io::Result<HcaInfo> {
    // With the provider: its driver's context data (siw refuses a context without it).
    let ctx = rverbs::provider::open(dev)?;
    let attr = ctx.query_device()?;
    let gids = if verbose {
        ctx.query_gid_table()?
    } else {
        Vec::new()
    };
    let wanted: Vec<u32> = match port {
        Some(p) => vec![p],
        None => (1..=u32::from(attr.phys_port_cnt)).collect(),
    };
    let mut ports = Vec::new();
    for p in wanted {
        ports.push(PortInfo {
            port: p,
            attr: ctx.query_port(p)?,
            gids: gids.iter().filter(|e| e.port == p).copied().collect(),
        });
    }
    let board_id = std::fs::read_to_string(dev.ibdev_path().join("board_id"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string());
    Ok(HcaInfo {
        name: dev.name().to_string(),
        transport: dev.transport(),
        board_id,
        attr,
        num_comp_vectors: ctx.num_comp_vectors(),
        ports,
    })
}

/// Why rverbs cannot drive a device of `driver`, or `None` when it has its provider.
pub fn unsupported_reason(driver: DriverId) -> Option<String> {
    if provider_for(driver).is_some() {
        return None;
    }
    let have: Vec<&str> = PROVIDERS.iter().map(|p| p.name).collect();
    Some(format!(
        "unsupported: rverbs has no provider for driver {driver} ({}); it has {}",
        driver.0,
        have.join(", ")
    ))
}

/// What `devinfo` prints about a device rverbs cannot open: sysfs's view only.
#[derive(Debug, Clone, Default)]
pub struct UnsupportedInfo {
    pub name: String,
    pub transport: Transport,
    pub reason: String,
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub vendor_id: Option<u32>,
    pub vendor_part_id: Option<u32>,
    pub netdev: Option<String>,
    pub ports: u32,
}

impl UnsupportedInfo {
    fn of(dev: &Device, reason: String) -> UnsupportedInfo {
        UnsupportedInfo {
            name: dev.name().to_string(),
            transport: dev.transport(),
            reason,
            fw_ver: dev.fw_ver().to_string(),
            node_guid: dev.node_guid(),
            sys_image_guid: dev.sys_image_guid(),
            vendor_id: dev.vendor_id(),
            vendor_part_id: dev.vendor_part_id(),
            netdev: dev.parent().map(str::to_string),
            ports: dev.port_count(),
        }
    }
}

/// The block for a device rverbs has no provider for (same layout as [`format_hca`]'s
/// first lines).
pub fn format_unsupported(u: &UnsupportedInfo) -> String {
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "hca_id:\t{}", u.name);
    let _ = writeln!(
        w,
        "\ttransport:\t\t\t{} ({})",
        u.transport.name().unwrap_or("invalid transport"),
        u.transport.0
    );
    let _ = writeln!(w, "\tsupport:\t\t\t{}", u.reason);
    if !u.fw_ver.is_empty() {
        let _ = writeln!(w, "\tfw_ver:\t\t\t\t{}", u.fw_ver);
    }
    let _ = writeln!(w, "\tnode_guid:\t\t\t{}", format_guid(u.node_guid));
    let _ = writeln!(
        w,
        "\tsys_image_guid:\t\t\t{}",
        format_guid(u.sys_image_guid)
    );
    if let Some(v) = u.vendor_id {
        let _ = writeln!(w, "\tvendor_id:\t\t\t0x{v:04x}");
    }
    if let Some(v) = u.vendor_part_id {
        let _ = writeln!(w, "\tvendor_part_id:\t\t\t{v}");
    }
    if let Some(n) = &u.netdev {
        let _ = writeln!(w, "\tnetdev:\t\t\t\t{n}");
    }
    let _ = writeln!(w, "\tphys_port_cnt:\t\t\t{}", u.ports);
    let _ = writeln!(w);
    s
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let o = parse(args)?;
    if o.help {
        print!("{USAGE}");
        return Ok(());
    }
    if o.list {
        let devs = devices()?;
        let n = devs.len();
        let mut s = format!("{n} HCA{} found:\n", if n == 1 { "" } else { "s" });
        for d in &devs {
            match unsupported_reason(d.driver_id()) {
                None => s += &format!("\t{}\n", d.name()),
                Some(why) => s += &format!("\t{} ({why})\n", d.name()),
            }
        }
        println!("{s}");
        return Ok(());
    }
    let devs = match &o.dev {
        Some(name) => vec![Device::by_name(name)?],
        None => devices()?,
    };
    for d in &devs {
        if let Some(why) = unsupported_reason(d.driver_id()) {
            print!("{}", format_unsupported(&UnsupportedInfo::of(d, why)));
            continue;
        }
        let h = gather(d, o.port, o.verbose)?;
        print!("{}", format_hca(&h, o.verbose));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs::uverbs::gid::Gid;
    use rverbs::uverbs::port::PhysState;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn parses_ibv_devinfo_options() {
        let o = parse(args("-d rxe0 -i 1 -v")).unwrap();
        assert_eq!(
            o,
            Opts {
                dev: Some("rxe0".into()),
                port: Some(1),
                verbose: true,
                ..Default::default()
            }
        );
        let o = parse(args("--ib-dev=mlx5_0 --ib-port 2 --list")).unwrap();
        assert_eq!(
            (o.dev.as_deref(), o.port, o.list),
            (Some("mlx5_0"), Some(2), true)
        );
    }

    #[test]
    fn argument_errors_say_what_is_wrong() {
        let e = parse(args("-i 0")).unwrap_err().to_string();
        assert!(e.contains("bad port \"0\""), "{e}");
        let e = parse(args("-i x")).unwrap_err().to_string();
        assert!(e.contains("bad port \"x\""), "{e}");
        let e = parse(args("-d")).unwrap_err().to_string();
        assert!(e.contains("missing argument"), "{e}");
        let e = parse(args("-q")).unwrap_err().to_string();
        assert!(e.contains("-q"), "{e}");
        let e = parse(args("extra")).unwrap_err().to_string();
        assert!(e.contains("extra"), "{e}");
    }

    /// rxe0 as the 6.1 kernel reports it (values from rxe_param.h).
    fn rxe_info() -> HcaInfo {
        let mut attr = DeviceAttr::default();
        attr.fw_ver = "0.0.0".into();
        attr.node_guid = 0x5054_00ff_fe12_3456;
        attr.sys_image_guid = 0x5054_00ff_fe12_3456;
        attr.max_mr_size = u64::MAX;
        attr.page_size_cap = 0xffff_f000;
        attr.vendor_id = 0xffffff;
        attr.max_qp = 1_048_576;
        attr.max_qp_wr = 1_048_576;
        attr.device_cap_flags = 0x0121_3476;
        attr.max_sge = 32;
        attr.max_sge_rd = 32;
        attr.max_cq = 1_048_576;
        attr.max_cqe = 32767;
        attr.max_mr = 524_287;
        attr.max_pd = 1_048_576;
        attr.max_qp_rd_atom = 128;
        attr.max_res_rd_atom = 258_048;
        attr.max_qp_init_rd_atom = 128;
        attr.atomic_cap = AtomicCap::HCA;
        attr.max_mw = 524_287;
        attr.max_mcast_grp = 8192;
        attr.max_mcast_qp_attach = 56;
        attr.max_total_mcast_qp_attach = 458_752;
        attr.max_ah = 32767;
        attr.max_srq = 917_504;
        attr.max_srq_wr = 1_048_576;
        attr.max_srq_sge = 27;
        attr.max_pkeys = 64;
        attr.local_ca_ack_delay = 15;
        attr.phys_port_cnt = 1;
        attr.device_cap_flags_ex = 0x3_0121_3476;
        let mut port = PortAttr::default();
        port.state = PortState::ACTIVE;
        port.max_mtu = Mtu::MTU_4096;
        port.active_mtu = Mtu::MTU_1024;
        port.gid_tbl_len = 1024;
        port.port_cap_flags = 0x0001_0000 | 0x0400_0000;
        port.max_msg_sz = 0x80_0000;
        port.pkey_tbl_len = 1;
        port.max_vl_num = 1;
        port.active_width = 2;
        port.active_speed = 1;
        port.phys_state = PhysState::LINK_UP;
        port.link_layer = LinkLayer::ETHERNET;
        let gid = |index: u32, s: &str| GidEntry {
            index,
            port: 1,
            gid: Gid::parse(s).unwrap(),
            gid_type: GidType::ROCE_V2,
            ndev_ifindex: 3,
        };
        HcaInfo {
            name: "rxe0".into(),
            transport: Transport::IB,
            board_id: None,
            attr,
            num_comp_vectors: 1,
            ports: vec![PortInfo {
                port: 1,
                attr: port,
                gids: vec![
                    gid(1, "::ffff:10.10.0.1"),
                    gid(0, "fe80::5054:ff:fe12:3456"),
                ],
            }],
        }
    }

    #[test]
    fn a_driver_without_provider_is_listed_as_unsupported() {
        assert_eq!(unsupported_reason(DriverId::RXE), None);
        assert_eq!(unsupported_reason(DriverId::MLX5), None);
        assert_eq!(unsupported_reason(DriverId::EFA), None);
        // bnxt_re stands for any driver rverbs has no provider for (siw and EFA did before
        // their own).
        let why = unsupported_reason(DriverId::BNXT_RE).unwrap();
        assert!(
            why.starts_with("unsupported: rverbs has no provider for driver bnxt_re (6)"),
            "{why}"
        );
        assert!(
            why.contains("rxe") && why.contains("mlx5") && why.contains("efa"),
            "{why}"
        );
        assert!(unsupported_reason(DriverId(4242))
            .unwrap()
            .contains("(4242)"));
        let u = UnsupportedInfo {
            name: "bnxt_re0".into(),
            transport: Transport(0),
            reason: why.clone(),
            node_guid: 0x0250_b6ff_fe41_2a10,
            sys_image_guid: 0x0250_b6ff_fe41_2a10,
            vendor_id: Some(0x14e4),
            vendor_part_id: Some(0x1750),
            ports: 1,
            ..Default::default()
        };
        assert_eq!(
            format_unsupported(&u),
            format!(
                "hca_id:\tbnxt_re0\n\ttransport:\t\t\tInfiniBand (0)\n\tsupport:\t\t\t{why}\n\
                 \tnode_guid:\t\t\t0250:b6ff:fe41:2a10\n\tsys_image_guid:\t\t\t0250:b6ff:fe41:2a10\n\
                 \tvendor_id:\t\t\t0x14e4\n\tvendor_part_id:\t\t\t5968\n\tphys_port_cnt:\t\t\t1\n\n"
            )
        );
    }

    #[test]
    fn short_form_matches_ibv_devinfo() {
        let want = "hca_id:\trxe0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t0.0.0
\tnode_guid:\t\t\t5054:00ff:fe12:3456
\tsys_image_guid:\t\t\t5054:00ff:fe12:3456
\tvendor_id:\t\t\t0xffffff
\tvendor_part_id:\t\t\t0
\thw_ver:\t\t\t\t0x0
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet

";
        assert_eq!(format_hca(&rxe_info(), false), want);
    }

    #[test]
    fn verbose_form_has_limits_flags_and_typed_gids() {
        let s = format_hca(&rxe_info(), true);
        for line in [
            "\tmax_mr_size:\t\t\t0xffffffffffffffff\n",
            "\tdevice_cap_flags:\t\t0x01213476\n",
            "\t\t\t\t\tBAD_PKEY_CNTR\n",
            "\t\t\t\t\tMEM_MGT_EXTENSIONS\n",
            "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
            "\tmax_srq_sge:\t\t\t27\n",
            "\trc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n",
            "\tcompletion_timestamp_mask not supported\n",
            "\tcore clock not supported\n",
            "\tdevice_cap_flags_ex:\t\t0x301213476\n",
            "\t\t\t\t\tUnknown flags: 0x300000000\n",
            "\ttag matching not supported\n",
            "\tnum_comp_vectors:\t\t1\n",
            "\t\t\tport_cap_flags:\t\t0x04010000\n",
            "\t\t\tactive_width:\t\t4X (2)\n",
            "\t\t\tactive_speed:\t\t2.5 Gbps (1)\n",
            "\t\t\tphys_state:\t\tLINK_UP (5)\n",
            "\t\t\tGID[  0]:\t\tfe80::5054:ff:fe12:3456, RoCE v2\n\t\t\tGID[  1]:\t\t::ffff:10.10.0.1, RoCE v2\n\n",
        ] {
            assert!(s.contains(line), "missing {line:?} in\n{s}");
        }
        // Flags in ibv_devinfo's order: RESIZE_MAX_WR is not set (bit 0 of 0x...76 is 0).
        assert!(!s.contains("RESIZE_MAX_WR"));
    }

    #[test]
    fn gid_lines_follow_type_and_link_layer() {
        let e = GidEntry {
            index: 2,
            port: 1,
            gid: Gid::parse("fe80::1:2:3:4").unwrap(),
            gid_type: GidType::ROCE_V1,
            ndev_ifindex: 0,
        };
        assert_eq!(
            gid_line(&e, LinkLayer::ETHERNET).unwrap(),
            "\t\t\tGID[  2]:\t\tfe80:0000:0000:0000:0001:0002:0003:0004, RoCE v1"
        );
        let ib = GidEntry {
            gid_type: GidType::IB,
            ..e
        };
        assert_eq!(
            gid_line(&ib, LinkLayer::INFINIBAND).unwrap(),
            "\t\t\tGID[  2]:\t\tfe80:0000:0000:0000:0001:0002:0003:0004"
        );
        let null_iid = GidEntry {
            gid: Gid::parse("fe80::").unwrap(),
            ..e
        };
        assert!(gid_line(&null_iid, LinkLayer::ETHERNET).is_none());
    }

    #[test]
    fn unknown_values_print_like_ibv_devinfo() {
        let mut h = rxe_info();
        h.ports[0].attr.state = PortState(7);
        h.ports[0].attr.active_mtu = Mtu(0);
        h.attr.atomic_cap = AtomicCap(9);
        h.attr.device_cap_flags = 1 << 31;
        let s = format_hca(&h, true);
        assert!(s.contains("state:\t\t\tinvalid state (7)"), "{s}");
        assert!(s.contains("active_mtu:\t\tinvalid MTU (0)"), "{s}");
        assert!(s.contains("invalid atomic capability (9)"), "{s}");
        assert!(s.contains("\t\t\t\t\tUnknown flags: 0x80000000\n"), "{s}");
    }
}
