//! Decoding the nested resource summary (`RDMA_NLDEV_ATTR_RES_SUMMARY`).

use super::*;

fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

fn entry(name: &str, curr: u64) -> Vec<u8> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    let mut e = nla(attr::RES_SUMMARY_ENTRY_NAME, &n);
    e.extend(nla(attr::RES_SUMMARY_ENTRY_CURR, &curr.to_ne_bytes()));
    nla(attr::RES_SUMMARY_ENTRY | 0x8000, &e)
}

#[test]
fn decodes_nested_summary() {
    let mut table = entry("pd", 3);
    table.extend(entry("qp", 12));
    let mut payload = nla(attr::DEV_INDEX, &7u32.to_ne_bytes());
    payload.extend(nla(attr::RES_SUMMARY | 0x8000, &table));
    let got = decode_res_summary(&payload).unwrap();
    assert_eq!(got, vec![("pd".to_string(), 3), ("qp".to_string(), 12)]);
}

#[test]
fn entry_without_count_is_an_error() {
    let e = nla(
        attr::RES_SUMMARY_ENTRY | 0x8000,
        &nla(attr::RES_SUMMARY_ENTRY_NAME, b"pd\0"),
    );
    let payload = nla(attr::RES_SUMMARY | 0x8000, &e);
    assert!(decode_res_summary(&payload).is_err());
}
