use std::io::Write as _;

use super::*;

/// A `.tar.gz` of `(name, contents)` files, names written as given (even `..`).
fn tar_gz(files: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
    let out = tempfile::NamedTempFile::new().unwrap();
    let gz = flate2::write::GzEncoder::new(out.reopen().unwrap(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        // Raw name bytes: `set_path` refuses `..`, which is what a hostile archive holds.
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append(&header, *data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
    out
}

fn zip_of(files: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut zip = zip::ZipWriter::new(out.reopen().unwrap());
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in files {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap();
    out
}

fn unpack(
    archive: &Path,
) -> (
    tempfile::TempDir,
    Result<Vec<SavedModelVersion>, ModelError>,
) {
    let into = tempfile::tempdir().unwrap();
    let kind = Artifact::of(archive).unwrap();
    let found = unpack_saved_model(archive, kind, into.path());
    (into, found)
}

fn numbers(found: &[SavedModelVersion]) -> Vec<u64> {
    found.iter().map(|v| v.version).collect()
}

fn refused(found: Result<Vec<SavedModelVersion>, ModelError>) -> String {
    match found {
        Err(ModelError::Unreadable(why)) => why,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_file_is_told_by_its_bytes() {
    let onnx = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(onnx.path(), b"\x08\x07\x12\x04kep").unwrap();
    assert_eq!(Artifact::of(onnx.path()).unwrap(), Artifact::Protobuf);
    let tgz = tar_gz(&[("m/saved_model.pb", b"x")]);
    assert_eq!(Artifact::of(tgz.path()).unwrap(), Artifact::SavedModelTar);
    let zip = zip_of(&[("saved_model.pb", b"x")]);
    assert_eq!(Artifact::of(zip.path()).unwrap(), Artifact::SavedModelZip);
    // What `torch.jit.save` writes.
    let script = zip_of(&[
        ("model/data.pkl", b"p"),
        ("model/code/__torch__.py", b"c"),
        ("model/version", b"3"),
    ]);
    assert_eq!(Artifact::of(script.path()).unwrap(), Artifact::TorchScript);
    let corrupt = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(corrupt.path(), b"PK\x03\x04 not a zip at all").unwrap();
    assert!(matches!(
        Artifact::of(corrupt.path()),
        Err(ModelError::Unreadable(_))
    ));
}

#[test]
fn one_saved_model_is_version_one_at_the_root_or_under_one_folder() {
    for archive in [
        tar_gz(&[
            ("m/saved_model.pb", b"g"),
            ("m/variables/variables.index", b"i"),
        ]),
        zip_of(&[
            ("saved_model.pb", b"g"),
            ("variables/variables.index", b"i"),
        ]),
    ] {
        let (into, found) = unpack(archive.path());
        let found = found.unwrap();
        assert_eq!(numbers(&found), [1]);
        assert!(found[0].dir.starts_with(into.path()));
        assert_eq!(
            std::fs::read(found[0].dir.join("variables/variables.index")).unwrap(),
            b"i"
        );
    }
}

#[test]
fn numbered_folders_are_versions_in_tf_servings_layout_and_tritons() {
    let tf = tar_gz(&[
        ("base/10/saved_model.pb", b"a"),
        ("base/2/saved_model.pb", b"b"),
        ("base/notes/saved_model.pb", b"ignored"),
        ("base/3/empty", b""),
    ]);
    let (_into, found) = unpack(tf.path());
    assert_eq!(numbers(&found.unwrap()), [2, 10]);
    let triton = zip_of(&[("1/model.savedmodel/saved_model.pb", b"a")]);
    let (_into, found) = unpack(triton.path());
    let found = found.unwrap();
    assert_eq!(numbers(&found), [1]);
    assert!(found[0].dir.ends_with("1/model.savedmodel"));
}

#[test]
fn an_archive_without_a_saved_model_is_refused() {
    let archive = tar_gz(&[("a/b/c.txt", b"x"), ("d.txt", b"y")]);
    assert!(refused(unpack(archive.path()).1).contains("no saved_model.pb"));
}

#[test]
fn entries_that_leave_the_folder_and_links_are_refused_and_nothing_lands_outside() {
    let outside = tempfile::tempdir().unwrap();
    let escape = format!(
        "../{}/evil",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    for archive in [
        tar_gz(&[("saved_model.pb", b"g"), (escape.as_str(), b"e")]),
        zip_of(&[("saved_model.pb", b"g"), ("../evil", b"e")]),
        zip_of(&[("saved_model.pb", b"g"), ("/tmp/kep-evil", b"e")]),
    ] {
        assert!(refused(unpack(archive.path()).1).contains("leaves its folder"));
    }
    assert!(!outside.path().join("evil").exists());
    assert!(!Path::new("/tmp/kep-evil").exists());

    let link = tempfile::NamedTempFile::new().unwrap();
    let gz = flate2::write::GzEncoder::new(link.reopen().unwrap(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    tar.append_link(&mut header, "saved_model.pb", "/etc/passwd")
        .unwrap();
    tar.into_inner().unwrap().finish().unwrap();
    assert!(refused(unpack(link.path()).1).contains("links are refused"));

    let zip_link = tempfile::NamedTempFile::new().unwrap();
    let mut zip = zip::ZipWriter::new(zip_link.reopen().unwrap());
    zip.add_symlink(
        "saved_model.pb",
        "/etc/passwd",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    zip.finish().unwrap();
    assert!(refused(unpack(zip_link.path()).1).contains("links are refused"));
}

#[test]
fn an_archive_that_unpacks_far_larger_than_itself_is_refused() {
    let zeros = vec![0u8; 64 << 20];
    let bomb = tar_gz(&[("saved_model.pb", &zeros)]);
    assert!(std::fs::metadata(bomb.path()).unwrap().len() < 1 << 20);
    assert!(refused(unpack(bomb.path()).1).contains("far more than its own size"));
}
