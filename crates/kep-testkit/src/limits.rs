//! The limits every service keeps (`kep_core::limits`: a rate per tenant, a rate per peer
//! for calls no tenant is known for, calls in flight per tenant), as one set of scenarios.
//! Each service's limits test implements [`Limited`] for its own surface and runs them; what
//! only one service does (another answer shape, another endpoint) stays in its test.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::{Held, eventually};

/// An answer read whole as a limit test reads it.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    pub headers: HeaderMap,
    /// The body as JSON; one that is not JSON as a string.
    pub body: Value,
}

impl Answer {
    pub async fn read(res: reqwest::Response) -> Answer {
        let (status, headers) = (res.status(), res.headers().clone());
        let retry_after = headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().unwrap());
        let text = res.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            retry_after,
            headers,
            body,
        }
    }
}

/// A service's surface as the scenarios call it.
pub trait Limited {
    /// Who a call is made as: a tenant's credentials, or wrong ones.
    type Credential;
    /// One call the limits count.
    fn call(&self, who: &Self::Credential) -> impl Future<Output = Answer>;
    /// A call whose body has not finished arriving, so it stays in flight until released.
    fn hold(&self, who: &Self::Credential) -> Held;
    /// The reason this service's 429 gives, read from its own answer shape; panics if the
    /// answer is not in that shape.
    fn limit_reason(answer: &Answer) -> String;
    /// Panics unless `answer` is this service's refusal of wrong credentials.
    fn assert_wrong_credential(answer: &Answer);
    /// Whether the limits let a call through: its answer when nothing refuses it.
    fn passed(&self, answer: &Answer) -> bool {
        answer.status == StatusCode::OK
    }
}

/// Panics unless `answer` is `S`'s 429, with `Retry-After`; returns its reason.
pub fn assert_limited<S: Limited>(answer: &Answer) -> String {
    assert_eq!(
        answer.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        answer.body
    );
    assert!(
        answer.retry_after.is_some_and(|s| s >= 1),
        "Retry-After: {:?}",
        answer.retry_after
    );
    S::limit_reason(answer)
}

/// The budgets [`each_tenant_spends_its_own_budget`] starts from: what is left of a burst
/// once the test's own set-up calls (a token, a Provision) have spent their share.
pub struct Budgets<'a, C> {
    /// Credentials no tenant has: they spend the budget of the address they come from.
    pub wrong: &'a C,
    pub wrong_left: usize,
    pub a: &'a C,
    pub a_left: usize,
    /// Another tenant, none of whose budget the test spent.
    pub b: &'a C,
}

/// With a burst and no refill while the test runs: wrong credentials spend only their
/// peer's budget, tenant a spends its own, and tenant b keeps its whole.
pub async fn each_tenant_spends_its_own_budget<S: Limited>(
    s: &S,
    budgets: Budgets<'_, S::Credential>,
) {
    for _ in 0..budgets.wrong_left {
        S::assert_wrong_credential(&s.call(budgets.wrong).await);
    }
    assert_limited::<S>(&s.call(budgets.wrong).await);
    for i in 0..budgets.a_left {
        let answer = s.call(budgets.a).await;
        assert!(s.passed(&answer), "call {i} of a: {answer:?}");
    }
    assert_limited::<S>(&s.call(budgets.a).await);
    let answer = s.call(budgets.b).await;
    assert!(s.passed(&answer), "b: {answer:?}");
}

/// With a limit of `limit` calls in flight: once `limit` of a's calls are held, a's next is
/// refused (`Retry-After: 1`), `b`'s passes; released, the held ones end well and a calls
/// again. The held calls' answers are returned.
pub async fn only_so_many_calls_in_flight<S: Limited>(
    s: &S,
    limit: usize,
    a: &S::Credential,
    b: Option<&S::Credential>,
) -> Vec<reqwest::Response> {
    let mut held: Vec<Held> = (0..limit).map(|_| s.hold(a)).collect();
    let refused = eventually(
        Duration::from_secs(30),
        "a call over the limit in flight is refused",
        async || {
            // A call that came first took a slot, and a held one was refused: hold another,
            // and call once it has had the pause to reach the server.
            let mut again = false;
            for h in &mut held {
                if h.0.is_finished() {
                    *h = s.hold(a);
                    again = true;
                }
            }
            if again {
                return Err("a held call was refused; held another".to_owned());
            }
            match s.call(a).await {
                answer if answer.status == StatusCode::TOO_MANY_REQUESTS => Ok(answer),
                answer => Err(format!("{answer:?}")),
            }
        },
    )
    .await;
    let reason = assert_limited::<S>(&refused);
    assert!(reason.contains("in flight"), "{reason}");
    assert_eq!(refused.retry_after, Some(1));
    if let Some(b) = b {
        let answer = s.call(b).await;
        assert!(s.passed(&answer), "b: {answer:?}");
    }
    let mut answers = Vec::new();
    for (call, release) in held {
        release.send(()).unwrap();
        let res = call.await.unwrap().unwrap();
        assert!(res.status().is_success(), "{}", res.status());
        answers.push(res);
    }
    // A released slot frees as its call's answer ends on the server, a moment after the
    // client has read it.
    eventually(
        Duration::from_secs(10),
        "a calls again after the release",
        async || {
            let answer = s.call(a).await;
            if s.passed(&answer) {
                Ok(())
            } else {
                Err(format!("{answer:?}"))
            }
        },
    )
    .await;
    answers
}

/// Calls at once spend a's burst; waiting refills it. A refused call spends nothing, so
/// asking often does not hold the refill back.
pub async fn a_spent_budget_refills<S: Limited>(s: &S, a: &S::Credential) {
    let mut spent = false;
    for _ in 0..20 {
        let answer = s.call(a).await;
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            assert_limited::<S>(&answer);
            spent = true;
            break;
        }
    }
    assert!(spent, "20 calls at once spend the burst");
    eventually(
        Duration::from_secs(30),
        "the budget refills",
        async || match s.call(a).await {
            answer if s.passed(&answer) => Ok(()),
            answer => Err(format!("{answer:?}")),
        },
    )
    .await;
}
