//! Triton's system shared memory extension, the memory side: regions a client registers
//! by their POSIX shared memory key (`shm_open`'s name, a file under `/dev/shm`), mapped
//! into this process, so that an inference's inputs are read from them and its outputs
//! written to them rather than carried in the request and the answer. A batch of 32
//! images is 18.4 MiB that would otherwise cross the gateway and the instance's socket.
//!
//! The texts and status codes are Triton's (`shared_memory_manager.cc`). Triton maps a
//! region whatever its client later does with it, and so does kep: a client that rewrites a
//! region while a call reads it gets what it wrote, as with Triton.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::{MmapOptions, MmapRaw};

use crate::Failure;

/// Triton's answer while client shared memory is not allowed (`--allow-client-shm`).
pub const DISABLED: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// The registered regions of one server, by name.
pub struct SharedMemory {
    allowed: bool,
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
}

/// A registered region: `byte_size` bytes of the object `key` from `offset`, mapped
/// shared and writable, as long as a registration or a call under way holds it.
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    map: MmapRaw,
}

/// The bytes of one tensor in a region: what a request's `shared_memory_region`,
/// `shared_memory_offset` and `shared_memory_byte_size` name, checked against the region.
#[derive(Clone)]
pub struct Slot {
    region: Arc<Region>,
    start: usize,
    len: usize,
}

impl SharedMemory {
    /// A server's regions; with `allowed` false, registering answers Triton's refusal.
    pub fn new(allowed: bool) -> SharedMemory {
        SharedMemory {
            allowed,
            regions: Mutex::default(),
        }
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Region>>> {
        self.regions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether clients may register and unregister regions (`--allow-client-shm`).
    pub fn allowed(&self) -> Result<(), Failure> {
        if self.allowed {
            Ok(())
        } else {
            Err(Failure::not_implemented(DISABLED))
        }
    }

    /// Maps `byte_size` bytes of the object `key` from `offset` as region `name`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), Failure> {
        self.allowed()?;
        let mut regions = self.regions();
        if regions.contains_key(name) {
            return Err(Failure::bad_request(format!(
                "shared memory region '{name}' already in manager"
            )));
        }
        let unopened =
            || Failure::internal(format!("Unable to open shared memory region: '{key}'"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(object_path(key).ok_or_else(unopened)?)
            .map_err(|_| unopened())?;
        let size = file
            .metadata()
            .map_err(|_| Failure::internal(format!("Invalid shared memory region: '{key}'")))?
            .len();
        let invalid = || {
            Failure::bad_request(format!(
                "failed to register shared memory region '{name}': invalid args"
            ))
        };
        if offset.checked_add(byte_size).is_none_or(|end| end > size) {
            return Err(invalid());
        }
        let len = usize::try_from(byte_size).map_err(|_| invalid())?;
        let map = MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(&file)
            .map_err(|e| {
                Failure::bad_request(format!(
                    "failed to register shared memory region '{name}': unable to process address space{e}"
                ))
            })?;
        regions.insert(
            name.to_owned(),
            Arc::new(Region {
                name: name.to_owned(),
                key: key.to_owned(),
                offset,
                byte_size,
                map,
            }),
        );
        Ok(())
    }

    /// Unregisters region `name`, or every region; a region no one registered is no error.
    /// Calls under way keep the mapping until they finish.
    pub fn unregister(&self, name: Option<&str>) -> Result<(), Failure> {
        self.allowed()?;
        let mut regions = self.regions();
        match name {
            Some(name) => {
                regions.remove(name);
            }
            None => regions.clear(),
        }
        Ok(())
    }

    /// Region `name`, or every region, in name order.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<Arc<Region>>, Failure> {
        let regions = self.regions();
        match name {
            None => Ok(regions.values().cloned().collect()),
            Some(name) => regions
                .get(name)
                .map(|r| vec![Arc::clone(r)])
                .ok_or_else(|| {
                    Failure::not_found(format!(
                        "Unable to find system shared memory region: '{name}'"
                    ))
                }),
        }
    }

    /// Why CUDA shared memory region `name` has no status: as in a Triton built without GPU
    /// support, none is ever registered. kep maps no device memory (`cudaIpc` handles).
    pub fn cuda_region_missing(&self, name: &str) -> Failure {
        Failure::not_found(if self.regions().contains_key(name) {
            format!(
                "The region named '{name}' is registered as system shared memory, not CUDA \
                 shared memory"
            )
        } else {
            format!("Unable to find cuda shared memory region: '{name}'")
        })
    }

    /// Why CUDA shared memory region `name` is not registered, as a Triton without GPU
    /// support says it (REST says first whether client shared memory is allowed; gRPC does
    /// not).
    pub fn cuda_refused(&self, name: &str, allowed_first: bool) -> Failure {
        match self.allowed() {
            Err(refused) if allowed_first => refused,
            _ => Failure::bad_request(format!(
                "failed to register CUDA shared memory region: '{name}', GPUs not supported"
            )),
        }
    }

    /// The `byte_size` bytes at `offset` of region `name`, Triton's checks applied.
    pub fn slot(&self, name: &str, offset: u64, byte_size: u64) -> Result<Slot, Failure> {
        let region = self.regions().get(name).cloned().ok_or_else(|| {
            Failure::not_found(format!("Unable to find shared memory region: '{name}'"))
        })?;
        let size = region.map.len() as u64;
        if offset >= size && !(offset == 0 && byte_size == 0) {
            return Err(Failure::bad_request(format!(
                "Invalid offset for shared memory region: '{name}'"
            )));
        }
        if offset.checked_add(byte_size).is_none_or(|end| end > size) {
            return Err(Failure::bad_request(format!(
                "Invalid offset + byte size for shared memory region: '{name}'"
            )));
        }
        // Both within the mapping's length, a `usize`.
        Ok(Slot {
            region,
            start: offset as usize,
            len: byte_size as usize,
        })
    }
}

/// Where `shm_open` finds `key` on Linux: `/dev/shm/` and the name without its leading
/// slash; a name with another slash, or none at all, is not one `shm_open` opens.
fn object_path(key: &str) -> Option<PathBuf> {
    let name = key.trim_start_matches('/');
    (!name.is_empty() && !name.contains('/') && name != "." && name != "..")
        .then(|| PathBuf::from("/dev/shm").join(name))
}

impl Slot {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot's bytes, where they lie: no copy.
    #[expect(
        unsafe_code,
        reason = "a shared mapping is memory that no Rust value owns; see SAFETY"
    )]
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `start + len` is within the mapping (checked by `SharedMemory::slot`),
        // which lives as long as `self.region`, borrowed for the slice's lifetime. Another
        // process may write the bytes meanwhile, as Triton's clients may: that changes the
        // values read, never where they are.
        unsafe { std::slice::from_raw_parts(self.region.map.as_ptr().add(self.start), self.len) }
    }

    /// Writes `bytes` at the slot's start: the output `name` of a call; more bytes than the
    /// slot holds is Triton's error.
    #[expect(
        unsafe_code,
        reason = "a shared mapping is memory that no Rust value owns; see SAFETY"
    )]
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), Failure> {
        if bytes.len() > self.len {
            return Err(Failure::internal(format!(
                "shared memory size specified with the request for output '{name}' ({} bytes) \
                 should be at least {} bytes to hold the results",
                self.len,
                bytes.len()
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `bytes`; the mapping is writable (`map_raw` of a file opened for
        // writing), and `bytes`, this process's own memory, cannot overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.region.map.as_mut_ptr().add(self.start),
                bytes.len(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared memory object of `size` bytes, as a client's `shm_open` and `ftruncate`
    /// make it, removed when dropped.
    struct Object(String);

    impl Object {
        fn new(size: u64) -> Object {
            static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let key = format!("/kep-shm-test-{}-{n}", std::process::id());
            let file = std::fs::File::create(object_path(&key).unwrap()).unwrap();
            file.set_len(size).unwrap();
            Object(key)
        }
    }

    impl Drop for Object {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(object_path(&self.0).unwrap());
        }
    }

    fn message(f: Failure) -> String {
        f.message
    }

    #[test]
    fn a_region_reads_what_is_written_at_its_offset() {
        let object = Object::new(64);
        let shm = SharedMemory::new(true);
        shm.register("r", &object.0, 16, 32).unwrap();
        let slot = shm.slot("r", 8, 4).unwrap();
        slot.write("out", &[1, 2, 3, 4]).unwrap();
        assert_eq!(shm.slot("r", 8, 4).unwrap().bytes(), &[1, 2, 3, 4]);
        // Offset 16 of the region is 32 of the object.
        let file = std::fs::read(object_path(&object.0).unwrap()).unwrap();
        assert_eq!(&file[24..28], &[1, 2, 3, 4]);
        // A registration outlives nothing it lends: a slot keeps the mapping.
        shm.unregister(Some("r")).unwrap();
        assert_eq!(slot.bytes(), &[1, 2, 3, 4]);
    }

    #[test]
    fn limits_are_triton_s_at_below_and_above() {
        let object = Object::new(64);
        let shm = SharedMemory::new(true);
        // Registering: the whole object, and one byte past it.
        shm.register("all", &object.0, 0, 64).unwrap();
        assert_eq!(
            message(shm.register("past", &object.0, 1, 64).unwrap_err()),
            "failed to register shared memory region 'past': invalid args"
        );
        assert_eq!(
            message(shm.register("all", &object.0, 0, 8).unwrap_err()),
            "shared memory region 'all' already in manager"
        );
        assert_eq!(
            message(shm.register("x", "/kep-no-such-object", 0, 8).unwrap_err()),
            "Unable to open shared memory region: '/kep-no-such-object'"
        );
        assert_eq!(
            message(shm.register("x", "/dir/escape", 0, 8).unwrap_err()),
            "Unable to open shared memory region: '/dir/escape'"
        );
        // A tensor: up to the region's end, and one byte past it.
        assert_eq!(shm.slot("all", 60, 4).unwrap().len(), 4);
        assert_eq!(shm.slot("all", 0, 64).unwrap().len(), 64);
        assert_eq!(
            message(shm.slot("all", 61, 4).err().unwrap()),
            "Invalid offset + byte size for shared memory region: 'all'"
        );
        assert_eq!(
            message(shm.slot("all", 64, 0).err().unwrap()),
            "Invalid offset for shared memory region: 'all'"
        );
        assert_eq!(
            message(shm.slot("none", 0, 4).err().unwrap()),
            "Unable to find shared memory region: 'none'"
        );
        // An output: as many bytes as the slot, and one more.
        let slot = shm.slot("all", 0, 4).unwrap();
        slot.write("y", &[0; 4]).unwrap();
        assert_eq!(
            message(slot.write("y", &[0; 5]).unwrap_err()),
            "shared memory size specified with the request for output 'y' (4 bytes) should be \
             at least 5 bytes to hold the results"
        );
    }

    #[test]
    fn registering_is_refused_unless_allowed() {
        let object = Object::new(8);
        let shm = SharedMemory::new(false);
        assert_eq!(
            message(shm.register("r", &object.0, 0, 8).unwrap_err()),
            DISABLED
        );
        assert_eq!(message(shm.unregister(None).unwrap_err()), DISABLED);
        assert!(shm.status(None).unwrap().is_empty());
    }

    #[test]
    fn status_names_one_region_or_all() {
        let (a, b) = (Object::new(16), Object::new(32));
        let shm = SharedMemory::new(true);
        shm.register("b", &b.0, 0, 32).unwrap();
        shm.register("a", &a.0, 4, 12).unwrap();
        let names = |rs: Vec<Arc<Region>>| rs.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(shm.status(None).unwrap()), ["a", "b"]);
        let a_status = &shm.status(Some("a")).unwrap()[0];
        assert_eq!((a_status.offset, a_status.byte_size), (4, 12));
        assert_eq!(
            message(shm.status(Some("c")).err().unwrap()),
            "Unable to find system shared memory region: 'c'"
        );
        shm.unregister(None).unwrap();
        assert!(shm.status(None).unwrap().is_empty());
    }
}
