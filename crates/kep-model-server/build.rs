//! Compiles the gRPC protos in `proto/` with protox, a protobuf compiler in Rust (the build
//! needs no protoc): Triton's into the `inference` module's server and client code (the
//! client drives `kep-bench infer`), TF Serving's into `tfserving::grpc`'s server code.

use protox::prost_reflect::prost_types::FileDescriptorSet;

/// The files with every file they import.
fn compiled(files: &[&str]) -> Result<FileDescriptorSet, protox::Error> {
    let mut compiler = protox::Compiler::new(["proto"])?;
    // Without source info the protos' comments (reStructuredText for Triton's docs, with
    // indented blocks rustdoc would take for doctests) stay out of the generated code.
    compiler.include_source_info(false).include_imports(true);
    compiler.open_files(files)?;
    Ok(compiler.file_descriptor_set())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_client(true)
        .build_transport(false)
        // Tensors as `Bytes`: decoded as views of the received message, not copied out of it.
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(compiled(&["grpc_service.proto"])?)?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .compile_fds(compiled(&[
            "tensorflow_serving/apis/prediction_service.proto",
            "tensorflow_serving/apis/model_service.proto",
        ])?)?;
    println!("cargo::rerun-if-changed=proto");
    Ok(())
}
