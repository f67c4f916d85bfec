//! The siw build's unit tests: the patches applied and refused, the package and
//! compiler lookups, the cache entry.

use super::*;

const SHOW: &str = "Package: linux-headers-6.1.0-57-amd64\nVersion: 6.1.192-3\n\
    Depends: linux-headers-6.1.0-57-common (= 6.1.192-3), linux-kbuild-6.1 (>= 6.1.192-3), \
    linux-compiler-gcc-12-x86\nDescription: x\n";

#[test]
fn the_headers_name_their_packages_and_compiler() {
    assert_eq!(
        header_depends(SHOW),
        ["linux-headers-6.1.0-57-common", "linux-kbuild-6.1"]
    );
    assert_eq!(compiler_of(SHOW).as_deref(), Some("gcc-12"));
    assert_eq!(compiler_of("Depends: linux-kbuild-6.1\n"), None);
    let trixie = "Depends: linux-base (>= 4.12~), linux-kbuild-6.12.118+deb13, gcc-14\n";
    assert_eq!(compiler_of(trixie).as_deref(), Some("gcc-14"));
    assert_eq!(field(SHOW, "Version"), Some("6.1.192-3"));
}

#[test]
fn the_build_root_is_of_the_kernels_release_and_has_kbuilds_libraries() {
    assert_eq!(debian_release("trixie-backports"), "trixie");
    assert_eq!(debian_release("trixie"), "trixie");
    assert_eq!(debian_release("bookworm-backports"), "bookworm");
    let os =
        "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n";
    assert_eq!(codename(os), Some("bookworm"));
    assert_eq!(codename("ID=debian\nVERSION_CODENAME=\n"), None);
    assert_eq!(codename("VERSION_CODENAME=\"noble\""), Some("noble"));
    // linux-kbuild-7.3.4+deb13 of trixie-backports (2026-12-06).
    let kbuild = "Package: linux-kbuild-7.3.4+deb13\nDepends: pahole, libc6 (>= 2.38), \
        libelf1t64 (>= 0.144), libssl3t64 (>= 3.0.0), zlib1g (>= 1:1.2.3.4)\n";
    assert_eq!(
        depends_names(kbuild),
        ["pahole", "libc6", "libelf1t64", "libssl3t64", "zlib1g"]
    );
    assert_eq!(depends_names("Depends: a (>= 1) | b, c\n"), ["a", "c"]);
    // 7.3's headers name their compiler by gcc-14-for-host.
    let bpo = "Depends: gcc-14-for-host, linux-base (>= 4.12~), \
        linux-headers-7.3.4+deb13-common (= 7.3.4-1~bpo13+1), linux-kbuild-7.3.4+deb13\n";
    assert_eq!(compiler_of(bpo).as_deref(), Some("gcc-14"));
    assert_eq!(
        header_depends(bpo),
        [
            "linux-headers-7.3.4+deb13-common",
            "linux-kbuild-7.3.4+deb13"
        ]
    );
}

#[test]
fn release_to_source_version() {
    assert_eq!(major_minor("6.1.0-57-amd64").unwrap(), "6.1");
    assert_eq!(major_minor("6.12.118+deb13-amd64").unwrap(), "6.12");
    assert!(major_minor("amd64").is_err());
}

#[test]
fn the_makefile_include_is_relocated() {
    let t = "include /usr/src/linux-headers-6.1.0-57-common/Makefile\n";
    assert_eq!(
        relocate_makefile(t, Path::new("/c/dl/root")),
        "include /c/dl/root/usr/src/linux-headers-6.1.0-57-common/Makefile\n"
    );
}

/// A stand-in for siw_cm.c: what the patches rewrite, in its functions (siw_recv_mpa_rr,
/// siw_proc_mpareply, siw_accept).
fn cm_source() -> String {
    format!(
        "static int siw_recv_mpa_rr(struct siw_cep *cep)\n{{\n\tif (!to_rcv) {{\n\
         {REPLY_NO_PDATA}\t\tif (rcvd == -EAGAIN)\n\t\t\treturn 0;\n\t}}\n\
         \trcvd = ksock_recv(\n\t\ts, cep->mpa.pdata + cep->mpa.bytes_rcvd - \
         sizeof(struct mpa_rr),\n{REPLY_PDATA}\tif (rcvd > to_rcv)\n\t\treturn -EPROTO;\n}}\n\n\
         static int siw_proc_mpareply(struct siw_cep *cep)\n{{\n\
         \tdown_write(&qp->state_lock);\n{REPLY_ASSOC}\n\
         \trv = siw_cm_upcall(cep, IW_CM_EVENT_CONNECT_REPLY, 0);\n}}\n\n\
         int siw_accept(struct iw_cm_id *id, struct iw_cm_conn_param *params)\n{{\n\
         \tup_write(&qp->state_lock);\n\n{ACCEPT_TAIL}\tsiw_cep_set_free(cep);\n\n\
         \treturn 0;\nerror:\n\treturn rv;\n}}\n"
    )
}

/// Each of `calls` as often in `out` as in `src`: nothing dropped or doubled.
fn same_calls(src: &str, out: &str, calls: &[&str]) {
    for call in calls {
        assert_eq!(
            out.matches(call).count(),
            src.matches(call).count(),
            "{call}"
        );
    }
}

#[test]
fn the_accept_patch_hands_the_socket_over_before_the_reply() {
    let out = patch_accept(&cm_source()).unwrap();
    assert!(!out.contains(ACCEPT_TAIL));
    assert_eq!(out.matches(ACCEPT_TAIL_PATCHED).count(), 1);
    assert!(ACCEPT_TAIL_PATCHED.contains(PATCH));
    let accept = out.find("int siw_accept(").unwrap();
    let at = |s: &str| accept + out[accept..].find(s).unwrap_or_else(|| panic!("no {s}"));
    let reply = at("siw_send_mpareqrep(");
    assert!(at("siw_sk_assign_rtr_upcalls(cep);") < reply);
    assert!(at("siw_qp_socket_assoc(cep, qp);") < reply);
    assert!(at("IW_CM_EVENT_ESTABLISHED") > reply);
    same_calls(
        &cm_source(),
        &out,
        &[
            "siw_sk_assign_rtr_upcalls(",
            "siw_qp_socket_assoc(",
            "siw_send_mpareqrep(",
            "siw_cm_upcall(",
            "goto error;",
        ],
    );
}

#[test]
fn the_reply_patch_leaves_what_follows_the_reply_to_the_qp() {
    let src = cm_source();
    let out = patch_reply(&src).unwrap();
    for (from, to) in [
        (REPLY_NO_PDATA, REPLY_NO_PDATA_PATCHED),
        (REPLY_PDATA, REPLY_PDATA_PATCHED),
        (REPLY_ASSOC, REPLY_ASSOC_PATCHED),
    ] {
        assert_eq!(out.matches(to).count(), 1, "{to}");
        assert!(!out.replacen(to, "", 1).contains(from), "{from}");
        assert!(to.contains(REPLY_PATCH), "{to}");
    }
    // Awaiting a reply, nothing is read past the frame: the check returns before the
    // 4-byte read, and the private data read asks for the frame's bytes only.
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("no {s}"));
    let early = at("if (cep->state == SIW_EPSTATE_AWAIT_MPAREP)\n\t\t\treturn 0;");
    assert!(early < at("ksock_recv(s, (char *)&word"));
    assert!(out.contains("to_rcv + (cep->state == SIW_EPSTATE_AWAIT_MPAREP ? 0 : 4)"));
    // What is queued goes to the QP after the hand-over and before CONNECT_REPLY, under
    // the socket lock, and only when the QP reached RTS.
    let kick = at("sk->sk_data_ready(sk);");
    assert!(at("siw_qp_socket_assoc(cep, qp);\n\n\tup_write(&qp->state_lock);") < kick);
    assert!(kick < at("IW_CM_EVENT_CONNECT_REPLY"));
    assert!(at("\tif (!rv) {\n") < at("lock_sock(sk);"));
    assert!(at("lock_sock(sk);") < kick && kick < at("release_sock(sk);"));
    same_calls(
        &src,
        &out,
        &[
            "ksock_recv(",
            "siw_qp_modify(",
            "siw_qp_socket_assoc(",
            "siw_cm_upcall(",
            "return -EPROTO;",
        ],
    );
}

#[test]
fn the_patched_source_names_every_patch() {
    let out = patch_source(&cm_source()).unwrap();
    assert_eq!(
        patch_names(),
        format!("{PATCH} {REPLY_PATCH} {TX_PATCH} {LAST_PATCH}")
    );
    assert!(out.contains(ACCEPT_TAIL_PATCHED) && out.contains(REPLY_ASSOC_PATCHED));
    assert!(out.ends_with(&format!(
        "MODULE_INFO(rverbs_patch, \"{PATCH} {REPLY_PATCH} {TX_PATCH} {LAST_PATCH}\");\n"
    )));
    let e = patch_source(&out).unwrap_err();
    assert!(e.0.contains("already patched"), "{e}");
}

#[test]
fn a_source_the_accept_patch_does_not_know_is_an_error() {
    let src = cm_source();
    let e = patch_accept(&src.replace("siw_accept(struct", "siw_accept2(struct")).unwrap_err();
    assert!(e.0.contains("no siw_accept definition"), "{e}");
    // One line of the tail changed (as a kernel fix would): not found.
    let changed = src.replace(
        "\tif (rv != 0)\n\t\tgoto error;",
        "\tif (rv)\n\t\tgoto error;",
    );
    let e = patch_accept(&changed).unwrap_err();
    assert!(e.0.contains("is not there as the bed knows it"), "{e}");
    let e = patch_source(&changed).unwrap_err();
    assert!(e.0.starts_with(PATCH), "{e}");
    let e = patch_accept(&format!("{src}{ACCEPT_TAIL}")).unwrap_err();
    assert!(e.0.contains("occurs 2 times"), "{e}");
}

#[test]
fn a_source_the_reply_patch_does_not_know_is_an_error() {
    let src = cm_source();
    // Each of its three places changed (as a kernel fix would): named, and nothing built.
    for (from, to, what) in [
        (
            "sizeof(word), MSG_DONTWAIT)",
            "sizeof(word), 0)",
            "read past a frame without private data",
        ),
        ("to_rcv + 4,", "to_rcv,", "read of the private data"),
        (
            "\tsiw_qp_socket_assoc(cep, qp);\n\n\tup_write",
            "\tsiw_qp_socket_assoc(cep, qp);\n\tup_write",
            "hand-over of the socket to the QP",
        ),
    ] {
        assert!(src.contains(from), "{from}");
        let e = patch_reply(&src.replacen(from, to, 1)).unwrap_err();
        assert!(e.0.contains(what), "{what}: {e}");
        assert!(e.0.contains("is not there as the bed knows it"), "{e}");
        let e = patch_source(&src.replacen(from, to, 1)).unwrap_err();
        assert!(e.0.starts_with(REPLY_PATCH), "{e}");
    }
    let e = patch_reply(&format!("{src}{REPLY_PDATA}")).unwrap_err();
    assert!(e.0.contains("occurs 2 times"), "{e}");
}

/// Stand-ins for the three files [`TX_PATCH`] changes: each place as Debian's 6.1, 6.12 and
/// 7.3 have it, in a few lines of what surrounds it.
fn tx_sources() -> Vec<(&'static str, String)> {
    let h = "struct siw_iwarp_tx {\n\tu8 tx_suspend : 1; /* stop sending DDP segs. */\n\
             \tu8 orq_fence : 1; /* ORQ full or Send fenced */\n\
             \tu8 in_syscall : 1; /* TX out of user context */\n\
             \tu8 zcopy_tx : 1; /* Use TCP_SENDPAGE if possible */\n};\n\
             int siw_run_sq(void *arg);\nint siw_qp_sq_process(struct siw_qp *qp);\n\
             int siw_sq_start(struct siw_qp *qp);\n";
    let try_1seg = "\t\t} else if (c_tx->in_syscall) {\n";
    let call = "\t\tdata = siw_try_1seg(c_tx, crc);\n";
    let tx = format!(
        "/*\n * Copy short payload at provided destination payload address\n */\n\
         static int siw_try_1seg(struct siw_iwarp_tx *c_tx, void *paddr)\n{{\n\
         \t\tif (!mem->mem_obj) {{\n\t\t\tmemcpy(paddr, kva, bytes);\n\
         {try_1seg}\t\t\tif (copy_from_user(paddr, u64_to_user_ptr(sge->laddr),\n\
         \t\t\t\t\t   bytes))\n\t\t\t\treturn -EFAULT;\n\t\t}} else {{\n\
         \t\t\tp = siw_get_page(mem, sge, 0, &pbl_idx);\n\t\t}}\n}}\n\
         static int siw_qp_prepare_tx(struct siw_iwarp_tx *c_tx)\n{{\n\
         \tcase SIW_OP_SEND:\n{call}\tcase SIW_OP_SEND_REMOTE_INV:\n{call}\
         \tcase SIW_OP_WRITE:\n{call}\tcase SIW_OP_READ_RESPONSE:\n{call}}}\n\
         static int siw_qp_sq_proc_tx(struct siw_qp *qp, struct siw_wqe *wqe)\n{{\n\
         \t\trv = siw_qp_prepare_tx(c_tx);\n}}\n\
         /*\n * Must be called with the QP state read-locked.\n */\n\
         int siw_qp_sq_process(struct siw_qp *qp)\n{{\n\
         \t\trv = siw_qp_sq_proc_tx(qp, wqe);\n}}\n\
         static void siw_sq_resume(struct siw_qp *qp)\n{{\n\
         \t\t\tint rv = siw_qp_sq_process(qp);\n}}\n"
    );
    let verbs = "\tif (rdma_is_kernel_res(&qp->base_qp.res)) {\n\
                 \t\trv = siw_sq_start(qp);\n\t} else {\n\
                 \t\tqp->tx_ctx.in_syscall = 1;\n\n\
                 \t\tif (siw_qp_sq_process(qp) != 0 && !(qp->tx_ctx.tx_suspend))\n\
                 \t\t\tsiw_qp_cm_drop(qp, 0);\n\n\
                 \t\tqp->tx_ctx.in_syscall = 0;\n\t}\nskip_direct_sending:\n";
    vec![
        ("siw.h", h.to_string()),
        ("siw_qp_tx.c", tx),
        ("siw_verbs.c", verbs.to_string()),
    ]
}

#[test]
fn the_tx_patch_passes_the_posting_thread_down_instead_of_a_bit() {
    let srcs = tx_sources();
    assert_eq!(srcs.iter().map(|(f, _)| *f).collect::<Vec<_>>(), TX_FILES);
    let out: Vec<(&str, String)> = srcs
        .iter()
        .map(|(f, t)| (*f, patch_tx(f, t).unwrap()))
        .collect();
    let all: String = out.iter().map(|(_, t)| t.as_str()).collect();
    // No bit left: not declared, set, cleared nor read.
    assert!(!all.contains("tx_ctx.in_syscall"), "{all}");
    assert!(!all.contains("c_tx->in_syscall"), "{all}");
    assert!(!all.contains("u8 in_syscall"), "{all}");
    // The neighbours of the bit are untouched.
    assert!(out[0].1.contains("\tu8 tx_suspend : 1;") && out[0].1.contains("\tu8 zcopy_tx : 1;"));
    // The parameter from the caller down to the copy.
    for want in [
        "int siw_qp_sq_process(struct siw_qp *qp, bool in_syscall);\n",
        "static int siw_try_1seg(struct siw_iwarp_tx *c_tx, void *paddr,\n\t\t\tbool in_syscall)\n",
        "\t\t} else if (in_syscall) {\n",
        "static int siw_qp_prepare_tx(struct siw_iwarp_tx *c_tx, bool in_syscall)\n",
        "static int siw_qp_sq_proc_tx(struct siw_qp *qp, struct siw_wqe *wqe,\n\t\t\t     bool in_syscall)\n",
        "\t\trv = siw_qp_prepare_tx(c_tx, in_syscall);\n",
        "int siw_qp_sq_process(struct siw_qp *qp, bool in_syscall)\n",
        "\t\trv = siw_qp_sq_proc_tx(qp, wqe, in_syscall);\n",
        // The transmit thread is never the posting thread; siw_post_send is.
        "\t\t\tint rv = siw_qp_sq_process(qp, false);\n",
        "\t\tif (siw_qp_sq_process(qp, true) != 0 &&\n\t\t    !(qp->tx_ctx.tx_suspend))\n\t\t\tsiw_qp_cm_drop(qp, 0);\n",
    ] {
        assert_eq!(all.matches(want).count(), 1, "{want:?} in {all}");
    }
    assert_eq!(
        all.matches("siw_try_1seg(c_tx, crc, in_syscall);").count(),
        4
    );
    // The copies themselves are what they were.
    same_calls(
        &srcs[1].1,
        &out[1].1,
        &[
            "copy_from_user(paddr",
            "siw_get_page(",
            "memcpy(",
            "return -EFAULT;",
        ],
    );
    // A source patched already is refused, file by file.
    for (f, t) in &out {
        let e = patch_tx(f, t).unwrap_err();
        assert!(e.0.contains("is not there as the bed knows it"), "{f}: {e}");
    }
}

#[test]
fn a_source_the_tx_patch_does_not_know_is_an_error() {
    let srcs = tx_sources();
    let tx = &srcs[1].1;
    // The test changed (as a kernel fix would): not found, nothing built.
    let e = patch_tx(
        "siw_qp_tx.c",
        &tx.replace("(c_tx->in_syscall)", "(c_tx->in_syscall && uaccess)"),
    )
    .unwrap_err();
    assert!(
        e.0.contains("siw_try_1seg's in_syscall test is not there"),
        "{e}"
    );
    let e = patch_tx(
        "siw_qp_tx.c",
        &format!("{tx}\t\t}} else if (c_tx->in_syscall) {{\n"),
    )
    .unwrap_err();
    assert!(e.0.contains("occurs 2 times, not once"), "{e}");
    // Three calls of siw_try_1seg where the bed knows four: refused, not half done.
    let three = tx.replacen("\t\tdata = siw_try_1seg(c_tx, crc);\n", "", 1);
    let e = patch_tx("siw_qp_tx.c", &three).unwrap_err();
    assert!(e.0.contains("occurs 3 times, not 4 times"), "{e}");
    let e = patch_tx(
        "siw_verbs.c",
        &srcs[2].1.replace("in_syscall = 0", "in_syscall = false"),
    )
    .unwrap_err();
    assert!(
        e.0.contains("siw_verbs.c: siw_post_send's in_syscall"),
        "{e}"
    );
}

/// crates/testbed/patches/0003: the patch file says what the bed does. Each line an edit
/// removes is a `-` line of the patch, each line it adds a `+` line.
#[test]
fn the_tx_patch_file_makes_the_bed_s_edits() {
    let patch = include_str!(
        "../../patches/0003-RDMA-siw-pass-the-posting-thread-s-context-down-the-TX-path.patch"
    );
    let minus: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix('-')).collect();
    let plus: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix('+')).collect();
    for e in TX_EDITS {
        let from: Vec<&str> = e.from.lines().collect();
        let to: Vec<&str> = e.to.lines().collect();
        for l in from.iter().filter(|l| !to.contains(l)) {
            assert!(
                minus.contains(l),
                "{}: {l:?} is not removed by the patch file",
                e.what
            );
        }
        for l in to.iter().filter(|l| !from.contains(l)) {
            assert!(
                plus.contains(l),
                "{}: {l:?} is not added by the patch file",
                e.what
            );
        }
    }
    for f in TX_FILES {
        assert!(
            patch.contains(&format!("+++ b/drivers/infiniband/sw/siw/{f}\n")),
            "{f}"
        );
    }
}

/// A stand-in for siw_qp_sq_proc_tx's tests after a segment went out, as Debian's 6.1, 6.12
/// and 7.3 have them.
fn last_source() -> String {
    "\tif (!rv) {\n\t\t/*\n\t\t * One segment sent. Processing completed if last\n\
     \t\t * segment, Do next segment otherwise.\n\t\t */\n\
     \t\tif (unlikely(c_tx->tx_suspend)) {\n\t\t\t/*\n\
     \t\t\t * Verbs, 6.4.: Try stopping sending after a full\n\
     \t\t\t * DDP segment if the connection goes down\n\
     \t\t\t * (== peer halfclose)\n\t\t\t */\n\
     \t\t\trv = -ECONNABORTED;\n\t\t\tgoto tx_done;\n\t\t}\n\
     \t\tif (c_tx->pkt.ctrl.ddp_rdmap_ctrl & DDP_FLAG_LAST) {\n\
     \t\t\tsiw_dbg_qp(qp, \"WQE completed\\n\");\n\t\t\tgoto tx_done;\n\t\t}\n\
     \t\tc_tx->state = SIW_SEND_HDR;\n\
     \t\tspin_lock_irqsave(&qp->sq_lock, flags);\n\
     \t\twqe->wr_status = SIW_WR_IDLE;\n\
     \t\trv = siw_activate_tx(qp);\n\
     \t\tspin_unlock_irqrestore(&qp->sq_lock, flags);\n"
        .to_string()
}

#[test]
fn the_last_segment_patch_completes_a_sent_wqe_before_it_looks_at_tx_suspend() {
    let src = last_source();
    let out = patch_last(&src).unwrap();
    let last = out.find("DDP_FLAG_LAST").unwrap();
    let suspend = out.find("if (unlikely(c_tx->tx_suspend))").unwrap();
    assert!(last < suspend, "{out}");
    // Nothing else changed: the same statements, once each, and what follows after both.
    same_calls(
        &src,
        &out,
        &[
            "rv = -ECONNABORTED;",
            "goto tx_done;",
            "siw_dbg_qp(",
            "c_tx->state = SIW_SEND_HDR;",
        ],
    );
    assert!(out.find("c_tx->state = SIW_SEND_HDR;").unwrap() > suspend);
    // After a completed WQE, the next one is activated only while tx_suspend is clear.
    let idle = out.find("wqe->wr_status = SIW_WR_IDLE;").unwrap();
    let stop = out.find("if (unlikely(qp->tx_ctx.tx_suspend)) {").unwrap();
    let activate = out.find("rv = siw_activate_tx(qp);").unwrap();
    assert!(idle < stop && stop < activate, "{out}");
    let unlock_and_leave = "\t\t\tspin_unlock_irqrestore(&qp->sq_lock, flags);\n\t\t\tgoto done;\n";
    assert!(out[stop..activate].contains(unlock_and_leave), "{out}");
    let e = patch_last(&src.replace("rv = siw_activate_tx(qp);", "rv = siw_activate(qp);"))
        .unwrap_err();
    assert!(e.0.contains("activation of the next WQE"), "{e}");
    let e = patch_last(&out).unwrap_err();
    assert!(e.0.contains("is not there as the bed knows it"), "{e}");
    let e = patch_last(&src.replace("(== peer halfclose)", "(peer halfclose)")).unwrap_err();
    assert!(
        e.0.contains("siw_qp_tx.c: siw_qp_sq_proc_tx's tests"),
        "{e}"
    );
}

/// crates/testbed/patches/0004: the patch file says what the bed does.
#[test]
fn the_last_segment_patch_file_makes_the_bed_s_edit() {
    let patch = include_str!(
        "../../patches/0004-RDMA-siw-complete-a-fully-sent-WQE-when-the-peer-closes.patch"
    );
    let minus: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix('-')).collect();
    let plus: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix('+')).collect();
    // A move: the DDP_FLAG_LAST block leaves its place below tx_suspend's and comes back
    // above it, with a comment.
    for l in [
        "\t\tif (c_tx->pkt.ctrl.ddp_rdmap_ctrl & DDP_FLAG_LAST) {",
        "\t\t\tsiw_dbg_qp(qp, \"WQE completed\\n\");",
    ] {
        assert!(
            plus.contains(&l) && minus.contains(&l),
            "{l:?} is not moved by the patch file"
        );
    }
    for e in LAST_EDITS {
        for l in e.to.lines().filter(|l| !e.from.lines().any(|f| f == *l)) {
            assert!(plus.contains(&l), "{l:?} is not added by the patch file");
        }
    }
    assert!(patch.contains("+++ b/drivers/infiniband/sw/siw/siw_qp_tx.c\n"));
}

#[test]
fn an_incomplete_cache_is_not_used() {
    let dir = std::env::temp_dir().join(format!("rverbs-testbed-siw-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    assert!(load(&dir).is_err());
    fs::write(dir.join("READY"), "6.1.0-57-amd64 6.1.192-3\n").unwrap();
    fs::write(dir.join("modules.order"), "libcrc32c.ko\nsiw.ko\n").unwrap();
    let e = load(&dir).unwrap_err();
    assert!(e.0.contains("not built with the bed's patch"), "{e}");
    // Built with the first patch only (before the second existed): rebuilt.
    fs::write(
        dir.join("READY"),
        format!("6.1.0-57-amd64 6.1.192-3 {PATCH}\n"),
    )
    .unwrap();
    let e = load(&dir).unwrap_err();
    assert!(
        e.0.contains(&format!("not built with the bed's patch {REPLY_PATCH}")),
        "{e}"
    );
    fs::write(
        dir.join("READY"),
        format!("6.1.0-57-amd64 6.1.192-3 {}\n", patch_names()),
    )
    .unwrap();
    fs::write(dir.join("siw.ko"), "").unwrap();
    let e = load(&dir).unwrap_err();
    assert!(e.0.contains("libcrc32c.ko is missing"), "{e}");
    fs::write(dir.join("libcrc32c.ko"), "").unwrap();
    assert_eq!(load(&dir).unwrap().len(), 2);
    let _ = fs::remove_dir_all(&dir);
}
