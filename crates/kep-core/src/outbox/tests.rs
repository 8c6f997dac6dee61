//! The dispatcher against an outbox in memory, on tokio's paused clock: back-off waits pass
//! at once, and the order of attempts is exact.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::*;

/// Items by id: (key, attempts made, wanted); each attempt fails while `failures` says so.
#[derive(Default)]
struct Memory {
    items: Mutex<HashMap<u32, (&'static str, u32, bool)>>,
    /// Fails the first n attempts of an item.
    failures: Mutex<HashMap<u32, u32>>,
    log: Mutex<Vec<String>>,
}

impl Memory {
    fn write(&self, id: u32, key: &'static str, fail_first: u32) {
        self.items.lock().unwrap().insert(id, (key, 0, true));
        self.failures.lock().unwrap().insert(id, fail_first);
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Outbox for Arc<Memory> {
    type Key = &'static str;
    type Id = u32;
    type Item = ();

    async fn adopt(
        &self,
        _: Option<&str>,
        _: &[String],
    ) -> anyhow::Result<Vec<(&'static str, u32)>> {
        let items = self.items.lock().unwrap();
        let mut pending: Vec<_> = items
            .iter()
            .filter(|(_, (_, _, wanted))| *wanted)
            .map(|(id, (key, _, _))| (*key, *id))
            .collect();
        pending.sort_by_key(|(_, id)| *id);
        Ok(pending)
    }

    async fn load(&self, id: &u32) -> anyhow::Result<Option<((), u32)>> {
        let items = self.items.lock().unwrap();
        Ok(items
            .get(id)
            .filter(|(_, _, wanted)| *wanted)
            .map(|(_, made, _)| ((), *made)))
    }

    async fn attempt(&self, id: &u32, _: &(), attempt: u32) -> Result<(), String> {
        // An attempt takes a while, so that keys overlap.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let fails = self.failures.lock().unwrap()[id] >= attempt;
        let mut items = self.items.lock().unwrap();
        let item = items.get_mut(id).unwrap();
        item.1 = attempt;
        item.2 = fails;
        self.log.lock().unwrap().push(format!(
            "{id}#{attempt} {}",
            if fails { "failed" } else { "sent" }
        ));
        if fails {
            Err(format!("no {attempt}"))
        } else {
            Ok(())
        }
    }

    async fn give_up(&self, id: &u32, attempts: u32, error: &str) {
        self.items.lock().unwrap().get_mut(id).unwrap().2 = false;
        self.log
            .lock()
            .unwrap()
            .push(format!("{id} given up after {attempts}: {error}"));
    }
}

fn ctx() -> Context {
    Context::standalone(&std::env::temp_dir())
}

fn policy(attempts: u32, queue: usize) -> Policy {
    Policy {
        attempts,
        retry: Backoff::from_first(Duration::from_secs(1)),
        queue,
    }
}

async fn drained(ctx: &Context) {
    ctx.tasks.close();
    ctx.tasks.wait().await;
    ctx.tasks.reopen();
}

#[tokio::test(start_paused = true)]
async fn a_keys_items_go_in_order_and_keys_do_not_wait_for_each_other() {
    let memory = Arc::new(Memory::default());
    let ctx = ctx();
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(3, 8), &ctx);
    memory.write(1, "a", 1); // fails once, then is sent after its back-off
    memory.write(2, "a", 0);
    memory.write(3, "b", 0);
    for (key, id) in [("a", 1), ("a", 2), ("b", 3)] {
        outbox.queue(key, id).await;
    }
    drained(&ctx).await;
    assert_eq!(
        memory.log(),
        ["1#1 failed", "3#1 sent", "1#2 sent", "2#1 sent"],
        "b's item went out while a's first waited; a's second waited for its first"
    );
    assert!(
        outbox.inner.workers.lock().unwrap().is_empty(),
        "idle workers end"
    );
}

#[tokio::test(start_paused = true)]
async fn an_item_is_given_up_when_its_attempts_are_spent_or_it_is_no_longer_wanted() {
    let memory = Arc::new(Memory::default());
    let ctx = ctx();
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(3, 8), &ctx);
    memory.write(1, "a", u32::MAX);
    outbox.queue("a", 1).await;
    drained(&ctx).await;
    assert_eq!(
        memory.log(),
        [
            "1#1 failed",
            "1#2 failed",
            "1#3 failed",
            "1 given up after 3: no 3"
        ]
    );

    // One no longer wanted between attempts is not tried again.
    let memory = Arc::new(Memory::default());
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(3, 8), &ctx);
    memory.write(2, "a", u32::MAX);
    outbox.queue("a", 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    memory.items.lock().unwrap().get_mut(&2).unwrap().2 = false;
    drained(&ctx).await;
    assert_eq!(memory.log(), ["2#1 failed"]);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_gives_the_next_item_up_at_once() {
    let memory = Arc::new(Memory::default());
    let ctx = ctx();
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(1, 1), &ctx);
    for id in 1..=3 {
        memory.write(id, "a", 0);
        outbox.queue("a", id).await;
    }
    drained(&ctx).await;
    let log = memory.log();
    assert!(
        log.contains(&"3 given up after 0: the queue of a is full (1 items)".to_owned()),
        "{log:?}"
    );
    assert!(log.contains(&"1#1 sent".to_owned()), "{log:?}");
}

#[tokio::test(start_paused = true)]
async fn resume_sends_what_a_previous_run_left_and_gives_up_what_it_had_spent() {
    let memory = Arc::new(Memory::default());
    memory.write(1, "a", 0);
    memory.write(2, "b", 0);
    // Its last attempt was made, but the stop came before it was given up.
    memory.items.lock().unwrap().get_mut(&2).unwrap().1 = 2;
    let ctx = ctx();
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(2, 8), &ctx);
    assert_eq!(outbox.resume().await.unwrap(), 2);
    drained(&ctx).await;
    let mut log = memory.log();
    log.sort();
    assert_eq!(
        log,
        ["1#1 sent", "2 given up after 2: its attempts were spent"]
    );
}

#[tokio::test(start_paused = true)]
async fn an_item_queued_as_the_platform_stops_is_left_for_the_next_start() {
    let memory = Arc::new(Memory::default());
    let ctx = ctx();
    let outbox = Dispatcher::new(Arc::clone(&memory), policy(3, 8), &ctx);
    memory.write(1, "a", u32::MAX); // waiting on its back-off when the stop comes
    outbox.queue("a", 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.shutdown.cancel();
    drained(&ctx).await;
    memory.write(2, "a", 0);
    outbox.queue("a", 2).await;
    assert_eq!(memory.log(), ["1#1 failed"], "neither sent nor given up");
    assert_eq!(
        outbox.outbox().adopt(None, &[]).await.unwrap(),
        [("a", 1), ("a", 2)]
    );
}
