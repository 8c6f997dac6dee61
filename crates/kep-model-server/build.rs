//! Compiles Triton's gRPC protos (`proto/`) into the `inference` module's server and client
//! code (the client drives `kep-bench infer`), with protox, a protobuf compiler in Rust: the
//! build needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without source info the protos' comments (reStructuredText for Triton's docs, with
    // indented blocks rustdoc would take for doctests) stay out of the generated code.
    let fds = protox::Compiler::new(["proto"])?
        .include_source_info(false)
        .include_imports(true)
        .open_file("grpc_service.proto")?
        .file_descriptor_set();
    tonic_prost_build::configure()
        .build_client(true)
        .build_transport(false)
        .compile_fds(fds)?;
    println!("cargo::rerun-if-changed=proto");
    Ok(())
}
