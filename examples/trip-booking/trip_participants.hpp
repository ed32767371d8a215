#pragma once
// The participants of sagas/trip-booking.yaml, written with the C++ SDK: hotel, airline, payment,
// insurance and notify, each in a schema of its own. `sagaflow-trip-services` runs all five in one
// process; the integration test runs them in its own.
//
// Stand-ins for the providers, driven by the saga's input so that a test can fail each branch:
//   hotel      declines a hotelId that starts with "full-"; holds a "slow-" one for `slow` first
//   airline    declines a flight numbered "XX000"; holds a "SLOW..." one for `slow` first
//   payment    declines a total over 5000.00
//   insurance  declines a stay of more than 30 nights

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "participant/participant.hpp"

namespace trip {

// The five participants' names and schemas (the YAML's `participant:`).
inline const std::vector<std::string> kParticipants{"hotel", "airline", "payment", "insurance", "notify"};

// The participant playing `role` (one of kParticipants), its handlers registered: `base` with the
// schema "trip_<role>", and the role as its name unless `base` names it (a test renames the
// participants to keep to topics of its own).
std::unique_ptr<sagaflow::Participant> Make(const std::string& role,
                                            sagaflow::ParticipantConfig base,
                                            std::chrono::milliseconds slow = std::chrono::seconds(3));

// `yaml` (a trip-booking definition) with each participant renamed "<role>-<suffix>": topics and
// consumer groups of their own (tests and benchmarks beside others on one broker).
std::string WithParticipantSuffix(std::string yaml, const std::string& suffix);

}  // namespace trip
