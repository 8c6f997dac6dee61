//! kep-core against a real PostgreSQL: `./test` runs this binary with
//! `KEP_TEST_DATABASE_URL` set to a throwaway cluster (without it there is nothing to test
//! against, and each test says so and passes).

mod cluster;
