//! proto/echo.proto → the messages and the Echo service's client and server, without `protoc`:
//! protox (a protobuf compiler in Rust) parses the file into a `FileDescriptorSet` and
//! tonic-prost-build generates the code from it (into `OUT_DIR`, included by `src/lib.rs`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/echo.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
