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

// `base` with the participant's name and schema ("trip_<name>") set, handlers registered.
std::unique_ptr<sagaflow::Participant> Make(const std::string& name,
                                            sagaflow::ParticipantConfig base,
                                            std::chrono::milliseconds slow = std::chrono::seconds(3));

}  // namespace trip
